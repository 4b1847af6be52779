"""The authorizer chain: each authorizer allows, denies, or has no opinion; the first that allows
or denies decides; if none does, the request is forbidden and the reasons collected on the way
(one a line) become the text after the 403 message (kube-apiserver's union authorizer).

The chain kube-apiserver builds for `--authorization-mode=Node,RBAC`, which is the default here:
system:masters first (the privileged-group authorizer: always allowed, whatever RBAC says),
then Node, then RBAC. `AlwaysAllow` and `AlwaysDeny` exist for the modes of the same names.
The same chain answers the API requests and the access reviews (`kubectl auth can-i`), so the
two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from nodeagent.cluster.auth.attributes import ALLOW, NO_OPINION, Attributes, AuthorizationDecision, Verdict
from nodeagent.cluster.auth.node import NodeAuthorizer, NodeGraph
from nodeagent.cluster.auth.rbac.index import RBACIndex
from nodeagent.cluster.auth.user import SYSTEM_MASTERS

MODES = ("AlwaysAllow", "AlwaysDeny", "Node", "RBAC")


class Authorizer(Protocol):
    """Decides one request from its Attributes; pure and in memory, safe on the event loop."""

    def authorize(self, attrs: Attributes) -> AuthorizationDecision: ...


class PrivilegedGroups:
    def __init__(self, groups: Sequence[str] = (SYSTEM_MASTERS,)) -> None:
        self.groups = frozenset(groups)

    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        return ALLOW if self.groups.intersection(attrs.user.groups) else NO_OPINION


class AlwaysAllow:
    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        return ALLOW


class AlwaysDeny:
    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        return AuthorizationDecision(Verdict.DENY)


class UnionAuthorizer:
    def __init__(self, authorizers: Sequence[Authorizer]) -> None:
        self.authorizers = tuple(authorizers)

    def authorize(self, attrs: Attributes) -> AuthorizationDecision:
        reasons: list[str] = []
        errors: list[str] = []
        for a in self.authorizers:
            d = a.authorize(attrs)
            if d.verdict is not Verdict.NO_OPINION:
                return d
            if d.reason:
                reasons.append(d.reason)
            if d.error:
                errors.append(d.error)
        return AuthorizationDecision(Verdict.NO_OPINION, "\n".join(reasons), "; ".join(errors))


def build_authorizer(modes: Sequence[str], rbac: RBACIndex | None = None,
                     graph: NodeGraph | None = None) -> UnionAuthorizer:
    """The chain for `authorizationMode` (e.g. ["Node", "RBAC"]), behind system:masters."""
    chain: list[Authorizer] = [PrivilegedGroups()]
    for mode in modes:
        if mode == "AlwaysAllow":
            chain.append(AlwaysAllow())
        elif mode == "AlwaysDeny":
            chain.append(AlwaysDeny())
        elif mode == "Node":
            if graph is None:
                raise ValueError("the Node authorizer needs the node graph")
            chain.append(NodeAuthorizer(graph))
        elif mode == "RBAC":
            if rbac is None:
                raise ValueError("the RBAC authorizer needs the RBAC index")
            chain.append(rbac)
        else:
            raise ValueError(f"unknown authorization mode {mode!r}: one of {', '.join(MODES)}")
    return UnionAuthorizer(chain)
