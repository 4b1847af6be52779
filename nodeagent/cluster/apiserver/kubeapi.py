"""The Kubernetes API as an aiohttp application: one dispatcher for every path, Status for every error.

    /api, /apis, /api/v1, /apis/<g>[/<v>]   discovery (discovery.py)
    /api/v1/..., /apis/<g>/<v>/...          resources (resources.py)
    /version, /healthz, /livez, /readyz     server facts and health
    /openapi/v3[/<gv>]                      OpenAPI v3, from an OpenAPISource (the schema room)

Every failure is a metav1.Status with kube's reason and code: unknown paths are 404 NotFound, a
malformed request is a 400 or 422, an unexpected exception is logged and answered 500 while the
server keeps serving.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import structlog
from aiohttp import web

from nodeagent.cluster.apiserver import protobuf
from nodeagent.cluster.apiserver.discovery import Discovery
from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.metrics_api import MetricsAPI, MetricsCatalog
from nodeagent.cluster.apiserver.negotiation import wants_aggregated_discovery
from nodeagent.cluster.apiserver.requestinfo import request_info
from nodeagent.cluster.apiserver.resources import ApiSettings, handle
from nodeagent.cluster.apiserver.scale import scale_handler
from nodeagent.cluster.apiserver.security import request_user, security_middleware
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.schema.decode import DecodeError, decode
from nodeagent.daemonkit import faults

log = structlog.get_logger(__name__)

KUBE_VERSION = (1, 37, 0)  # the API this server speaks (kubectl warns when its minor is 2+ away)
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's default request size limit
# a 2xx to one of these is a promise that survives SIGKILL: the fault point `answer.<resource>[/<sub>]`
# (daemonkit/faults.py) kills the server between the commit and the answer, for the tests that prove it
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LOGGED_BODY_MAX = 64 * 1024  # the debug request log decodes bodies up to this size
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REGISTRY: web.AppKey[Registry] = web.AppKey("registry", Registry)
SETTINGS: web.AppKey[ApiSettings] = web.AppKey("settings", ApiSettings)


class OpenAPIDocument(Protocol):
    @property
    def body(self) -> bytes: ...

    @property
    def etag(self) -> str: ...


class OpenAPIDocumentSet(Protocol):
    @property
    def index(self) -> OpenAPIDocument: ...

    def get(self, group_version_path: str) -> OpenAPIDocument | None: ...


class OpenAPISource(Protocol):
    def documents(self) -> OpenAPIDocumentSet:
        """The /openapi/v3 index and the documents by group-version path ("api/v1")."""
        ...


def version_info(software: str) -> dict[str, str]:
    major, minor, patch = KUBE_VERSION
    return {"major": str(major), "minor": str(minor), "emulationMajor": str(major), "emulationMinor": str(minor),
            "minCompatibilityMajor": str(major), "minCompatibilityMinor": str(minor - 1),
            "gitVersion": f"v{major}.{minor}.{patch}+nodeagent-{software}", "gitCommit": "", "gitTreeState": "clean",
            "buildDate": "", "goVersion": f"python{platform.python_version()}", "compiler": "cpython",
            "platform": f"{platform.system().lower()}/{platform.machine()}"}


@web.middleware
async def status_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.StatusError as e:
        return json_response(e.status, e.code)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        if e.status == 413:
            err = errors.request_too_large(MAX_BODY)
        elif e.status == 404:
            err = errors.path_not_found()
        else:
            err = errors.StatusError(e.status, e.reason.replace(" ", ""), e.text or e.reason)
        return json_response(err.status, err.code)
    except ConnectionResetError:
        raise
    except Exception:
        log.exception("api_unhandled_error", method=request.method, path=request.path)
        err = errors.internal("an unexpected error happened; see the server log")
        return json_response(err.status, err.code)


@web.middleware
async def request_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """At debug level, one `api_request` line a request (method, path, query, user, code, ms), with the body
    of a write when it names its kind (create, update, apply: what a client sent, decoded). Secrets in
    it are left to the logging chain's redaction, which `server run` puts last (auth/redact.py); a body
    that does not say what it is (a patch, protobuf, undecodable bytes) is logged by size only, since
    nothing could tell a Secret's values in it from anything else."""
    start = time.monotonic()
    code: int | None = None  # None: the handler did not return (a watch the client closed, a cancel)
    ended: str | None = None
    try:
        response = await handler(request)
        code = response.status
        return response
    except BaseException as e:
        ended = type(e).__name__
        raise
    finally:
        fields: dict[str, Any] = {"ended": ended} if ended else {}
        if code is not None and request.method in ("POST", "PUT", "PATCH") and request.body_exists:
            fields.update(await _logged_body(request))
        user = request_user(request)
        log.debug("api_request", method=request.method, path=request.path, query=request.query_string, code=code,
                  user=user.name if user is not None else None,
                  ms=round((time.monotonic() - start) * 1000, 1), **fields)


async def _logged_body(request: web.Request) -> dict[str, Any]:
    """The body as the handler decoded it (protobuf, YAML, else JSON), when it names its kind."""
    try:
        raw = await request.read()  # the handler's read, cached by aiohttp
    except Exception:  # noqa: BLE001 - a log line never fails a request (too large, connection gone)
        return {}
    value: Any = None
    if len(raw) <= LOGGED_BODY_MAX:  # a big body is not decoded a second time on the event loop
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        try:
            if ctype == protobuf.CONTENT_TYPE:
                value = protobuf.decode(raw)
            else:
                value = decode(raw, "application/yaml" if ctype.endswith("yaml") else "application/json").value
        except (DecodeError, protobuf.ProtobufError):
            value = None
    if isinstance(value, dict) and isinstance(value.get("kind"), str):
        return {"body": value}
    return {"body_bytes": len(raw)}


class KubeAPI:
    """The dispatcher: non-resource paths here, resource paths to resources.handle."""

    def __init__(self, registry: Registry, settings: ApiSettings, *, openapi: OpenAPISource | None = None,
                 software_version: str = "0.1.0", ready: Callable[[], bool] | None = None,
                 metrics: MetricsAPI | None = None) -> None:
        self.registry, self.settings, self.openapi, self.metrics = registry, settings, openapi, metrics
        self.discovery = Discovery(registry.catalog if metrics is None
                                   else MetricsCatalog(registry.catalog, metrics.resources))
        self.version = orjson.dumps(version_info(software_version))
        self.ready = ready or (lambda: True)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        ri = request_info(request.method, path, request.query.get("watch"))
        if ri.resource_request:
            if self.metrics is not None and ri.api_prefix == "apis" and ri.group in self.metrics.groups:
                return await self.metrics.groups[ri.group](request, ri)
            response = await handle(request, ri, self.registry, self.settings)
            if ri.verb in WRITE_VERBS and response.status < 300:  # committed, not yet answered
                faults.hit(f"answer.{ri.resource}/{ri.subresource}" if ri.subresource else f"answer.{ri.resource}")
            return response
        if request.method not in ("GET", "HEAD"):
            raise errors.path_not_found()
        accept = request.headers.get("Accept")
        parts = [p for p in path.strip("/").split("/") if p]
        if parts == ["api"]:
            body, ctype = self.discovery.api(wants_aggregated_discovery(accept))
            return web.Response(body=body, headers={"Content-Type": ctype})
        if parts == ["apis"]:
            body, ctype = self.discovery.apis(wants_aggregated_discovery(accept))
            return web.Response(body=body, headers={"Content-Type": ctype})
        doc: bytes | None = None
        if len(parts) == 2 and parts[0] == "api":
            doc = self.discovery.resources("", parts[1])
        elif len(parts) == 2 and parts[0] == "apis":
            doc = self.discovery.group(parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            doc = self.discovery.resources(parts[1], parts[2])
        elif parts == ["version"]:
            doc = self.version
        elif parts and parts[0] in ("healthz", "livez", "readyz"):
            return self._health(parts, request)
        elif parts and parts[0] == "openapi":
            return self._openapi(parts)
        if doc is None:
            raise errors.path_not_found()
        return web.Response(body=doc, headers={"Content-Type": "application/json"})

    def _health(self, parts: list[str], request: web.Request) -> web.Response:
        ok = self.ready() if parts[0] == "readyz" else True
        if "verbose" in request.query:
            text = f"[+]ping ok\n[{'+' if ok else '-'}]store ok\n{parts[0]} check {'passed' if ok else 'failed'}\n"
        else:
            text = "ok" if ok else f"[-]store failed: reason withheld\n{parts[0]} check failed"
        return web.Response(text=text, status=200 if ok else 500, content_type="text/plain")

    def _openapi(self, parts: list[str]) -> web.Response:
        if self.openapi is None or len(parts) < 2 or parts[1] != "v3":
            raise errors.path_not_found()
        docs = self.openapi.documents()
        if len(parts) == 2:
            return web.Response(body=docs.index.body, headers={"Content-Type": "application/json",
                                                               "ETag": docs.index.etag})
        doc = docs.get("/".join(parts[2:]))
        if doc is None:
            raise errors.path_not_found()
        return web.Response(body=doc.body, headers={"Content-Type": "application/json", "ETag": doc.etag,
                                                    "Cache-Control": "public, immutable"})


def create_kube_app(registry: Registry, settings: ApiSettings, *, openapi: OpenAPISource | None = None,
                    ready: Callable[[], bool] | None = None, log_requests: bool = False,
                    metrics: MetricsAPI | None = None) -> web.Application:
    """The application; `log_requests` adds the debug request log (request_log), outermost so it
    sees the code the client gets."""
    middlewares: list[Any] = [request_log] if log_requests else []
    middlewares.append(status_errors)
    if settings.security is not None:
        middlewares.append(security_middleware(settings.security))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY)
    for info in registry.catalog:  # every kind with a `scale` subresource serves it through ScaleREST's rules
        if registry.catalog.subresource(info, "scale") is not None:
            settings.subresources.setdefault((info.group, info.plural, "scale"), scale_handler)
    api = KubeAPI(registry, settings, openapi=openapi, ready=ready, metrics=metrics)
    app[REGISTRY] = registry
    app[SETTINGS] = settings
    app.router.add_route("*", "/{tail:.*}", api.dispatch)
    return app
