"""What an authorizer decides on (kube-apiserver's authorizer.Attributes), what it answers, and
the 401 and 403 Status bodies kube-apiserver sends, word for word."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.auth.user import UserInfo

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class Attributes:
    """One request as the authorizers see it. A resource request has verb, api_group,
    api_version, resource, subresource, namespace and name (each "" when absent); a non-resource
    request has verb (the lower-case HTTP method) and path. field_selector and label_selector
    are the raw query values of list, watch and deletecollection."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    field_selector: str = ""
    label_selector: str = ""


class Verdict(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"
    NO_OPINION = "NoOpinion"


@dataclass(frozen=True, slots=True)
class AuthorizationDecision:
    """An authorizer's answer; `reason` is the text kube-apiserver appends to its 403 message
    (and puts in SubjectAccessReview status.reason); `error` an evaluation error, if any."""

    verdict: Verdict
    reason: str = ""
    error: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


ALLOW = AuthorizationDecision(Verdict.ALLOW)
NO_OPINION = AuthorizationDecision(Verdict.NO_OPINION)


def _sanitize(text: str) -> str:
    # kube-apiserver escapes what could read as HTML; quotes stay
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _go_quote(text: str) -> str:
    """Go's %q for the strings that appear here (names, verbs, paths)."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _forbidden_detail(attrs: Attributes) -> str:
    who = _go_quote(attrs.user.name)
    if not attrs.resource_request:
        return f"User {who} cannot {attrs.verb} path {_go_quote(attrs.path)}"
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    scope = (f"in the namespace {_go_quote(attrs.namespace)}" if attrs.namespace else "at the cluster scope")
    return (f"User {who} cannot {attrs.verb} resource {_go_quote(resource)} in API group "
            f"{_go_quote(attrs.api_group)} {scope}")


def forbidden_message(attrs: Attributes, reason: str = "") -> str:
    """kube-apiserver's 403 message, e.g. `pods is forbidden: User "alice" cannot list resource
    "pods" in API group "" in the namespace "default"` (and `: <reason>` when there is one)."""
    detail = _sanitize(_forbidden_detail(attrs))
    if reason:
        detail = f"{detail}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return f"forbidden: {detail}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f"{qualified} {_go_quote(attrs.name)} is forbidden: {detail}"
    return f"{qualified} is forbidden: {detail}"


def forbidden_status(attrs: Attributes, reason: str = "") -> dict[str, Any]:
    """The 403 body (metav1.Status) kube-apiserver sends for a denied request."""
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.resource_request and attrs.api_group:
        details["group"] = attrs.api_group
    if attrs.resource_request and attrs.resource:
        details["kind"] = attrs.resource
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": forbidden_message(attrs, reason), "reason": "Forbidden", "code": 403}
    body["details"] = details
    return body


def unauthorized_status() -> dict[str, Any]:
    """The 401 body kube-apiserver sends (it says nothing about why: that goes to the log)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
