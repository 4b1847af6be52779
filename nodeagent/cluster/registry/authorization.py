"""Authorization as the registry and the HTTP layer ask for it (kube's authorizer.Attributes).

The Authorizer protocol is what RBAC and the Node authorizer (cluster/auth/) implement; a server
without authorization runs AlwaysAllow, kube-apiserver's `--authorization-mode=AlwaysAllow`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Attributes:
    user: str
    groups: tuple[str, ...]
    verb: str
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""  # non-resource requests (/healthz, /version)
    resource_request: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    denied: bool = False  # an explicit deny (no later authorizer is asked)


class Authorizer(Protocol):
    async def authorize(self, attrs: Attributes) -> Decision: ...


class AlwaysAllow:
    """Every request is allowed: the server runs without authorization (loopback, no authentication)."""

    async def authorize(self, attrs: Attributes) -> Decision:
        return Decision(True, "authorization is off (AlwaysAllow)")
