"""An HTTP request's authorization attributes, as kube-apiserver's RequestInfoFactory derives them.

/api/v1/... (the legacy group "") and /apis/<group>/<version>/... are resource requests:
`namespaces/<ns>/<resource>[/<name>[/<subresource>]]` or `<resource>[/<name>[/<subresource>]]`;
GET/HEAD on a collection is list (watch with ?watch=true), DELETE on one is deletecollection;
the deprecated `/watch/` and `/proxy/` path verbs are understood. `namespaces/<ns>` itself (and
its status and finalize subresources) is the namespace object. A list or watch whose
fieldSelector pins metadata.name gets that name, so a rule with resourceNames can allow it.
Everything else (/healthz, /version, /openapi/v3, `/api`, `/apis/apps`) is a non-resource request
with the lower-case method as its verb.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.cluster.auth.attributes import Attributes
from nodeagent.cluster.auth.user import UserInfo

_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_SELECTOR_VERBS = frozenset({"list", "watch", "deletecollection"})
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class RequestInfoError(ValueError):
    """A resource path that names no kind (e.g. /api/v1/watch): kube-apiserver fails such a
    request; the API server should answer 404 NotFound."""


def _watch(value: str | None) -> bool:
    if value is None:
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return value.lower() not in ("false", "0")  # upstream's fallback for a value it cannot parse


def _split_selector(selector: str) -> list[str]:
    """A field selector's terms, split on unescaped commas (fields.ParseSelector's escaping)."""
    terms, cur, escaped = [], [], False
    for ch in selector:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return terms


def _unescape(value: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(ch)
    return "".join(out)


def exact_field_value(selector: str, field: str) -> str | None:
    """The value `field` must equal in a field selector (`field=v` or `field==v`), else None."""
    for term in _split_selector(selector):
        term = term.strip()
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and not key.endswith("!") and key.strip() == field:
                return _unescape(value.strip())
    return None


def _path_segment_ok(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "%" not in name


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The Attributes of one request. `query` maps each parameter to its first value."""
    verb = method.lower()
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return Attributes(user=user, verb=verb, resource_request=False, path=path)
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(rest) < 3:
            return Attributes(user=user, verb=verb, resource_request=False, path=path)
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]

    via_path = False
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            raise RequestInfoError(f"unable to determine kind and namespace from url {path}")
        verb, rest, via_path = rest[0], rest[1:], True
    else:
        verb = _VERBS.get(method.upper(), "")

    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]

    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""

    if not name and verb == "get":
        verb = "watch" if _watch(query.get("watch")) else "list"
        selector = query.get("fieldSelector")
        if selector:
            pinned = exact_field_value(selector, "metadata.name")
            if pinned is not None and _path_segment_ok(pinned):
                name = pinned
    if not name and verb == "delete":
        verb = "deletecollection"

    field_selector = label_selector = ""
    if not via_path and verb in _SELECTOR_VERBS:
        field_selector = query.get("fieldSelector", "")
        label_selector = query.get("labelSelector", "")
    return Attributes(user=user, verb=verb, resource_request=True, api_group=group, api_version=version,
                      resource=resource, subresource=subresource, namespace=namespace, name=name, path=path,
                      field_selector=field_selector, label_selector=label_selector)
