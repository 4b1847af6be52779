"""Who a request is: kube-apiserver's user.Info, and the user and group names Kubernetes reserves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

SYSTEM_MASTERS = "system:masters"
NODES_GROUP = "system:nodes"
MONITORING_GROUP = "system:monitoring"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
KUBE_PROXY = "system:kube-proxy"
KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"
KUBE_SCHEDULER = "system:kube-scheduler"

SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
SERVICE_ACCOUNT_USER_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNT_GROUP_PREFIX = "system:serviceaccounts:"
NODE_USER_PREFIX = "system:node:"

CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_UID_KEY = "authentication.kubernetes.io/node-uid"

_EMPTY: Mapping[str, tuple[str, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated (or anonymous) caller: name, uid, groups and extra, as kube-apiserver's
    user.DefaultInfo. Immutable, so one value can be cached and shared between requests."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _EMPTY, hash=False)

    def with_group(self, group: str) -> UserInfo:
        if group in self.groups:
            return self
        return UserInfo(self.name, self.uid, (*self.groups, group), self.extra)

    def to_api(self) -> dict[str, object]:
        """The authentication.k8s.io/v1 UserInfo shape (as in SelfSubjectReview and TokenReview)."""
        out: dict[str, object] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


def frozen_extra(values: Mapping[str, str | Iterable[str]]) -> Mapping[str, tuple[str, ...]]:
    """An immutable `extra` map from {key: value or values}; empty values are left out."""
    out: dict[str, tuple[str, ...]] = {}
    for k, v in values.items():
        vals = (v,) if isinstance(v, str) else tuple(v)
        if any(vals):
            out[k] = tuple(x for x in vals if x)
    return MappingProxyType(out)


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, str]:
    return (SERVICE_ACCOUNTS_GROUP, SERVICE_ACCOUNT_GROUP_PREFIX + namespace)


def split_service_account_username(username: str) -> tuple[str, str] | None:
    """(namespace, name) of `system:serviceaccount:<ns>:<name>`, else None."""
    if not username.startswith(SERVICE_ACCOUNT_USER_PREFIX):
        return None
    namespace, sep, name = username[len(SERVICE_ACCOUNT_USER_PREFIX):].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


def node_username(node: str) -> str:
    return NODE_USER_PREFIX + node


def node_identity(user: UserInfo) -> str | None:
    """The node name of an agent's identity (`system:node:<name>` in group system:nodes), else
    None; "" for a member of system:nodes whose name has the prefix and nothing after it (upstream
    NodeIdentifier: such a user is a node, but an unidentifiable one)."""
    if not user.name.startswith(NODE_USER_PREFIX) or NODES_GROUP not in user.groups:
        return None
    return user.name[len(NODE_USER_PREFIX):]
