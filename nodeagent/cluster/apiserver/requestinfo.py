"""What a request path means: kube-apiserver's RequestInfoFactory (apiserver/pkg/endpoints/request).

    /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]
    /apis/<group>/<version>/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]
    /api/v1/watch/...          (the deprecated watch prefix)

`namespaces/<ns>/status` and `namespaces/<ns>/finalize` are the namespace's own subresources.
The verb comes from the method, whether a name is given and `?watch=`: get, list, watch, create,
update, patch, delete, deletecollection. Anything else is a non-resource request (discovery,
/version, /healthz, /openapi).
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True, slots=True)
class RequestInfo:
    resource_request: bool
    path: str
    verb: str  # lower-case kube verb, or the lower-case HTTP method for non-resource requests
    api_prefix: str = ""  # "api" or "apis"
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    name: str = ""
    subresource: str = ""
    parts: tuple[str, ...] = ()  # the path segments after the group/version


def _is_watch(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true")


def request_info(method: str, path: str, watch_param: str | None = None) -> RequestInfo:
    """Parse one request. Unknown shapes are non-resource requests (the caller answers 404)."""
    method = method.upper()
    segments = path.strip("/").split("/") if path.strip("/") else []
    plain = RequestInfo(False, path, method.lower())
    if not segments or segments[0] not in ("api", "apis"):
        return plain
    prefix = segments[0]
    rest = segments[1:]
    if prefix == "api":
        if not rest:
            return plain
        group, version, rest = "", rest[0], rest[1:]
    else:
        if len(rest) < 2:
            return plain
        group, version, rest = rest[0], rest[1], rest[2:]
    if not rest:
        return plain  # /api/v1, /apis/<g>/<v>: discovery
    if any(not s for s in rest):
        return RequestInfo(True, path, "", prefix, group, version, parts=tuple(rest))
    watch = _is_watch(watch_param)
    if rest[0] == "watch":
        rest, watch = rest[1:], True
        if not rest:
            return plain
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3 and subresource != "proxy":  # <resource>/<name>/proxy/<path...>: the path is the proxy's
        return RequestInfo(True, path, "", prefix, group, version, namespace, resource, name, subresource,
                           tuple(rest))
    if method in ("GET", "HEAD"):
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return RequestInfo(True, path, verb, prefix, group, version, namespace, resource, name, subresource, tuple(rest))
