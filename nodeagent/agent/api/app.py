"""The agent's HTTP API: Kubernetes-shaped node and pod resources over aiohttp.

Routes only decode and check the request, call the backend, and map its exceptions to Status
objects (see api/status.py); all policy lives behind AgentBackend.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from nodeagent.agent.api.attach import attach_handler
from nodeagent.agent.api.backend import AdmissionError, AgentBackend, AlreadyExists, DurabilityError
from nodeagent.agent.api.exec import exec_handler
from nodeagent.agent.api.metrics import Metrics
from nodeagent.agent.runtime import logs, logtimes
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.wellknown import API_SERVER_SOURCE, CONFIG_HASH, CONFIG_MIRROR, CONFIG_SOURCE, SERVER_UID
from nodeagent.daemonkit.auth import Authenticator
from nodeagent.daemonkit.body import decode_body
from nodeagent.daemonkit.status import StatusError, invalid, status_middleware

# what only the agent may set: static/mirror sources, and the server-uid (the control-plane pod
# sync stops the pods it marks, so a client must not mark one)
_SOURCE_KEYS = frozenset({CONFIG_SOURCE, CONFIG_MIRROR, CONFIG_HASH, SERVER_UID})
MAX_BODY = 1 << 20  # 1 MiB: a pod manifest is a few KiB; more is a mistake or an attack
BACKEND: web.AppKey[AgentBackend] = web.AppKey("backend", AgentBackend)


def _backend(request: web.Request) -> AgentBackend:
    return request.app[BACKEND]


def _not_found(ns: str, name: str) -> StatusError:
    return StatusError(404, f'pods "{name}" not found in namespace "{ns}"', name=name)


def _int_param(request: web.Request, key: str) -> int | None:
    """Optional query integer >= 0; anything else is a 400 naming the parameter."""
    raw = request.query.get(key)
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise StatusError(400, f"{key} must be an integer >= 0, got {raw!r}")
    return int(raw)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def get_node(request: web.Request) -> web.Response:
    return web.json_response(_backend(request).node())


async def list_pods(request: web.Request) -> web.Response:
    items = _backend(request).list_pods()
    ns = request.match_info.get("ns")
    if ns is not None:
        items = [p for p in items if p.get("metadata", {}).get("namespace") == ns]
    return web.json_response({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                              "items": items})


async def _manifest(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # raises 413 beyond client_max_size
    try:  # in a thread: a big body takes ~0.1 s to decode, other requests go on meanwhile
        data = await asyncio.to_thread(decode_body, raw, request.content_type)
    except ValueError as e:
        raise StatusError(400, str(e)) from None
    if not isinstance(data, dict):
        raise StatusError(400, f"the body must be a Pod object, not a JSON {_kind(data)}")
    return data


def _kind(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _api_source(manifest: dict[str, Any]) -> dict[str, Any]:
    """Mark the pod as coming from the API. Static and mirror pods are critical (never
    evicted), so a client must not be able to claim to be one through annotations."""
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        return manifest
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict):
        return manifest  # validation reports it
    annotations = {k: v for k, v in annotations.items() if k not in _SOURCE_KEYS}
    annotations[CONFIG_SOURCE] = API_SERVER_SOURCE
    return {**manifest, "metadata": {**meta, "annotations": annotations}}


async def create_pod(request: web.Request) -> web.Response:
    manifest = await _manifest(request)
    url_ns = request.match_info.get("ns")
    meta = manifest.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
    if url_ns is not None and isinstance(meta, dict):
        body_ns = meta.get("namespace")
        if body_ns in (None, ""):
            manifest = {**manifest, "metadata": {**meta, "namespace": url_ns}}
        elif body_ns != url_ns:
            raise StatusError(400, f"the namespace of the provided object ({body_ns}) does not "
                                   f"match the namespace sent on the request ({url_ns})")
    try:
        pod = await _backend(request).create_pod(_api_source(manifest))
    except ValidationErrors as e:
        raise invalid("Pod", name, e.errors) from None
    except FieldError as e:
        raise invalid("Pod", name, [e]) from None
    except AdmissionError as e:
        raise StatusError(422, e.message, reason=e.reason, name=name or None) from None
    except AlreadyExists as e:
        raise StatusError(409, str(e), name=e.name) from None
    except DurabilityError as e:
        raise StatusError(500, str(e), reason="InternalError", name=name or None) from None
    return web.json_response(pod, status=201)


async def get_pod(request: web.Request) -> web.Response:
    ns, name = request.match_info["ns"], request.match_info["name"]
    pod = _backend(request).get_pod(ns, name)
    if pod is None:
        raise _not_found(ns, name)
    return web.json_response(pod)


async def delete_pod(request: web.Request) -> web.Response:
    ns, name = request.match_info["ns"], request.match_info["name"]
    grace = _int_param(request, "gracePeriodSeconds")
    try:
        pod = await _backend(request).delete_pod(ns, name, grace)
    except DurabilityError as e:
        raise StatusError(500, str(e), reason="InternalError", name=name) from None
    if pod is None:
        raise _not_found(ns, name)
    return web.json_response(pod)


PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")


async def resize_pod(request: web.Request) -> web.Response:
    """PATCH pods/{name}/resize (KEP-1287): the containers' cpu and memory, changed in place."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    if request.content_type not in PATCH_TYPES:
        raise StatusError(415, "the body of the request was in an unknown format - accepted media types include: "
                          + ", ".join(PATCH_TYPES), name=name)
    raw = await request.read()
    try:
        patch = await asyncio.to_thread(decode_body, raw, "application/json")
    except ValueError as e:
        raise StatusError(400, str(e)) from None
    if not isinstance(patch, dict):
        raise StatusError(400, f"the patch must be a JSON object, not a JSON {_kind(patch)}")
    try:
        pod = await _backend(request).resize_pod(ns, name, patch, request.content_type)
    except ValidationErrors as e:
        raise invalid("Pod", name, e.errors) from None
    except FieldError as e:
        raise invalid("Pod", name, [e]) from None
    except DurabilityError as e:
        raise StatusError(500, str(e), reason="InternalError", name=name) from None
    if pod is None:
        raise _not_found(ns, name)
    return web.json_response(pod)


def _bool_param(request: web.Request, key: str) -> bool:
    raw = request.query.get(key)
    if raw is None or raw.lower() in ("", "false", "0"):
        return False
    if raw.lower() in ("true", "1"):
        return True
    raise StatusError(400, f"{key} must be true or false, got {raw[:40]!r}")


FOLLOW_POLL_S = 0.2  # how often a follower looks for new output (the container writes its file itself)
LOG_CHUNK = 256 * 1024


def _since_ns(request: web.Request) -> int | None:
    """sinceSeconds or sinceTime as a wall time in ns (the kubelet takes either, the server
    refuses both at once); bad values are a 400 naming the parameter."""
    seconds = _int_param(request, "sinceSeconds")
    if seconds is not None:
        return time.time_ns() - seconds * 1_000_000_000
    raw = request.query.get("sinceTime")
    if not raw:
        return None
    try:
        return logtimes.parse_time_ns(raw)
    except ValueError:
        raise StatusError(400, f"sinceTime must be an RFC 3339 time, got {raw[:40]!r}") from None


async def read_log(request: web.Request) -> web.StreamResponse:
    """GET pods/<name>/log, the kubelet's containerLogs: container, previous, tailLines, limitBytes,
    follow (stream until the run ends or the client goes), timestamps, sinceSeconds, sinceTime.
    The container writes its log file itself; the times of its lines come from the side file the
    log clock keeps (runtime/logtimes.py), and only a request for them reads it."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    container = request.query.get("container") or None
    tail = _int_param(request, "tailLines")
    limit = _int_param(request, "limitBytes")
    follow, previous = _bool_param(request, "follow"), _bool_param(request, "previous")
    timestamps, since = _bool_param(request, "timestamps"), _since_ns(request)
    if limit == 0:
        raise StatusError(400, "limitBytes must be greater than 0")
    try:
        source = _backend(request).log_source(ns, name, container, previous)
    except FieldError as e:  # e.g. several containers and none named
        raise StatusError(400, str(e)) from None
    except logs.LogUnavailable as e:
        raise StatusError(400, str(e), name=name) from None
    if source is None:
        what = f'container "{container}" of pod' if container else "pod"
        raise StatusError(404, f'{what} "{name}" not found in namespace "{ns}"', name=name)
    follow = follow and not previous
    if tail is not None:
        head, size = await asyncio.to_thread(logs.tail_bytes, source.path, tail)
        reader = logs.LogReader(source.path, size, until_size=None if follow else size)
    else:
        head, reader = b"", await asyncio.to_thread(logs.LogReader.whole, source.path, follow=follow)
        size = -1
    lines = None
    if timestamps or since is not None:
        lines = await asyncio.to_thread(_line_clock, source, head, size, timestamps, since)
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    left = limit if limit is not None else -1
    try:
        await resp.prepare(request)
        chunk = head
        while True:
            if lines is not None:
                chunk = lines.feed(chunk)
            if chunk:
                if left >= 0:
                    chunk = chunk[:left]
                    left -= len(chunk)
                await resp.write(chunk)
                if left == 0:
                    break
            alive = follow and source.running()
            chunk = await asyncio.to_thread(reader.read, LOG_CHUNK)
            if not chunk:
                if not alive:
                    rest = lines.feed(b"", final=True) if lines is not None else b""
                    if rest:
                        await resp.write(rest[:left] if left >= 0 else rest)
                    break
                await asyncio.sleep(FOLLOW_POLL_S)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went (kubectl logs -f ended by the user)
    finally:
        reader.close()
    return resp


def _line_clock(source: logs.LogSource, head: bytes, live_size: int, timestamps: bool,
                since: int | None) -> logtimes.LineClock:
    """Blocking: the run's times, and where the bytes about to be read start in the run."""
    times = logtimes.load(source.path)
    start = times.base + live_size - len(head) if live_size >= 0 else logtimes.stream_start(source.path, times)
    if source.running():
        fallback = time.time_ns
    else:
        mtime = logtimes.mtime_ns(source.path)

        def fallback() -> int:
            return mtime
    return logtimes.LineClock(times, start, timestamps=timestamps, since_ns=since, fallback=fallback)


async def exec_pod(request: web.Request) -> web.StreamResponse:
    return await exec_handler(request, _backend(request))


async def attach_pod(request: web.Request) -> web.StreamResponse:
    return await attach_handler(request, _backend(request))


async def reload_config(request: web.Request) -> web.Response:
    """Re-read the config file; 200 with what was applied, 422 with the errors if it was rejected."""
    result = await _backend(request).reload_config()
    return web.json_response(result, status=200 if result.get("ok") else 422)


async def list_events(request: web.Request) -> web.Response:
    items = _backend(request).events()
    return web.json_response({"apiVersion": "v1", "kind": "EventList", "items": items})


def create_app(backend: AgentBackend, max_body: int = MAX_BODY, auth: Authenticator | None = None,
               metrics: Metrics | None = None) -> web.Application:
    """The aiohttp application; the caller runs it (web.AppRunner) and owns its lifetime.

    Middleware order, outermost first: metrics (times every request, denied ones included),
    status (exceptions -> Status), auth (after routing, before any handler). Without `auth`
    every request is allowed (tests; the daemon always passes one). `metrics` adds GET /metrics.
    """
    middlewares = [*([metrics.middleware] if metrics else []), status_middleware,
                   *([auth.middleware] if auth else [])]
    app = web.Application(middlewares=middlewares, client_max_size=max_body)
    app[BACKEND] = backend
    if metrics is not None:
        app.router.add_get("/metrics", metrics.handle)
    pod = "/api/v1/namespaces/{ns}/pods/{name}"
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/node", get_node)
    app.router.add_get("/api/v1/pods", list_pods)
    app.router.add_post("/api/v1/pods", create_pod)
    app.router.add_get("/api/v1/namespaces/{ns}/pods", list_pods)
    app.router.add_post("/api/v1/namespaces/{ns}/pods", create_pod)
    app.router.add_get(pod, get_pod)
    app.router.add_delete(pod, delete_pod)
    app.router.add_get(pod + "/log", read_log)
    app.router.add_get(pod + "/exec", exec_pod)
    app.router.add_get(pod + "/attach", attach_pod)
    app.router.add_get(pod + "/resize", get_pod)
    app.router.add_patch(pod + "/resize", resize_pod)
    app.router.add_get("/api/v1/events", list_events)
    app.router.add_post("/api/v1/config/reload", reload_config)
    return app


__all__ = ["BACKEND", "MAX_BODY", "create_app"]
