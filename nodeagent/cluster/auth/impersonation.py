"""Impersonation (`kubectl --as U --as-group G --as-uid X`): the request runs as another user
when the requestor may `impersonate` each part of that identity, as kube-apiserver's filter:

    Impersonate-User: U              users/U (group ""), or serviceaccounts/<name> in <ns> for
                                     system:serviceaccount:<ns>:<name> (which also brings its
                                     groups unless Impersonate-Group is given)
    Impersonate-Group: G (repeated)  groups/G
    Impersonate-Uid: X               uids/X (authentication.k8s.io)
    Impersonate-Extra-<key>: V       userextras/<key> named V (authentication.k8s.io); the key
                                     is percent-decoded and lower-cased, each value checked

Groups, extras or a uid without a user are 400. Each check that fails is 403 with
kube-apiserver's message (`users "bob" is forbidden: User "alice" cannot impersonate resource
"users" in API group "" at the cluster scope`). The new user gets `system:authenticated` (or
`system:unauthenticated` when impersonating system:anonymous). The API server calls this after
authentication and before building the request's attributes, and drops the headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from nodeagent.cluster.auth.attributes import Attributes, forbidden_status
from nodeagent.cluster.auth.authorizer import Authorizer
from nodeagent.cluster.auth.user import (
    ALL_AUTHENTICATED,
    ALL_UNAUTHENTICATED,
    ANONYMOUS,
    UserInfo,
    frozen_extra,
    service_account_groups,
    split_service_account_username,
)

USER_HEADER = "impersonate-user"
UID_HEADER = "impersonate-uid"
GROUP_HEADER = "impersonate-group"
EXTRA_PREFIX = "impersonate-extra-"
AUTHN_GROUP = "authentication.k8s.io"


class ImpersonationError(Exception):
    """The request cannot run as asked: `code` (400 or 403) and the Status `body` to answer."""

    def __init__(self, code: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body


def _bad_request(message: str) -> ImpersonationError:
    return ImpersonationError(400, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": message, "reason": "BadRequest", "code": 400})


def is_impersonating(headers: Iterable[tuple[str, str]]) -> bool:
    return any(k.lower() in (USER_HEADER, UID_HEADER, GROUP_HEADER) or k.lower().startswith(EXTRA_PREFIX)
               for k, _ in headers)


def impersonate(requestor: UserInfo, headers: Iterable[tuple[str, str]], authorizer: Authorizer) -> UserInfo | None:
    """The user to run as, None when the request impersonates nobody; ImpersonationError else.
    `headers` are every (name, value) pair of the request (repeated headers repeated)."""
    user_values: list[str] = []
    uids: list[str] = []
    groups: list[str] = []
    extras: list[tuple[str, str]] = []
    for k, v in headers:
        lk = k.lower()
        if lk == USER_HEADER:
            user_values.append(v)
        elif lk == UID_HEADER:
            uids.append(v)
        elif lk == GROUP_HEADER:
            groups.append(v)
        elif lk.startswith(EXTRA_PREFIX):
            extras.append((unquote(lk[len(EXTRA_PREFIX):]), v))
    wanted = next((u for u in user_values if u), "")
    if not (wanted or uids or groups or extras):
        return None
    if not wanted:
        asked = [f"Group {g}" for g in groups] + [f"UserExtra {k}={v}" for k, v in extras] + [f"UID {u}" for u in uids]
        raise _bad_request(f"requested [{', '.join(asked)}] without impersonating a user")

    def check(resource: str, name: str, group: str = "", namespace: str = "", subresource: str = "") -> None:
        attrs = Attributes(user=requestor, verb="impersonate", api_group=group,
                           api_version="v1", resource=resource, subresource=subresource,
                           namespace=namespace, name=name)
        decision = authorizer.authorize(attrs)
        if not decision.allowed:
            raise ImpersonationError(403, forbidden_status(attrs, decision.reason))

    new_groups: list[str] = []
    sa = split_service_account_username(wanted)
    if sa is not None:
        check("serviceaccounts", sa[1], namespace=sa[0])
        if not groups:
            new_groups.extend(service_account_groups(sa[0]))
    else:
        check("users", wanted)
    extra: dict[str, list[str]] = {}
    for key, value in extras:
        check("userextras", value, group=AUTHN_GROUP, subresource=key)
        extra.setdefault(key, []).append(value)
    for g in groups:
        check("groups", g)
        new_groups.append(g)
    uid = ""
    for u in uids:
        check("uids", u, group=AUTHN_GROUP)
        uid = u
    marker = ALL_UNAUTHENTICATED if wanted == ANONYMOUS else ALL_AUTHENTICATED
    if marker not in new_groups:
        new_groups.append(marker)
    return UserInfo(name=wanted, uid=uid, groups=tuple(new_groups), extra=frozen_extra(extra))
