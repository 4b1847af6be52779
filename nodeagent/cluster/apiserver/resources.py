"""The resource endpoints: HTTP requests to registry calls and back (kube-apiserver's handlers).

One entry point, `handle(request, info)`, for every `/api` and `/apis` resource path: it finds the
resource in the catalog, checks scope and verb, parses query options (kube's names and rules),
decodes the body (JSON or YAML; malformed input is a 400, never a crash) and answers with the
object, a list, a Table (`as=Table`), a watch stream, or a Status. Subresources other than
`status` and `finalize` are looked up in `SubresourceHandlers`, where later work (pods/log,
exec, attach, eviction, binding, nodes/proxy) registers its handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from nodeagent.cluster.apiserver import protobuf
from nodeagent.cluster.apiserver.encoding import (
    WatchEncoder,
    bookmark,
    event_line,
    json_response,
    list_object,
    raw_list,
    table_list,
    table_object,
    table_row_bytes,
)
from nodeagent.cluster.apiserver.negotiation import Output, body_type, choose_output
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.apiserver.security import Security, request_user
from nodeagent.cluster.apiserver.security import review as security_review
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.reviews import ReviewStore
from nodeagent.cluster.registry.options import Context, ListOptions, parse_delete_options
from nodeagent.cluster.registry.plugins import PATCH_CONTENT_TYPES
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore
from nodeagent.cluster.registry.table import IncludeObject
from nodeagent.cluster.schema.decode import Decoded, DecodeError, decode
from nodeagent.core.clock import Clock
from nodeagent.core.errors import FieldError
from nodeagent.core.selectors import SelectorError, parse_field_selector, parse_label_selector
from nodeagent.daemonkit.heap import trim_malloc_soon

log = structlog.get_logger(__name__)

SubresourceHandler = Callable[[web.Request, GenericStore, RequestInfo, Context], Awaitable[web.StreamResponse]]
MAX_FIELD_MANAGER = 128
BIG_LIST = 1000  # items from which a list's freed memory is handed back to the system after it
DEFAULT_WATCH_TIMEOUT = (1800, 3600)  # kube-apiserver: min-request-timeout 1800 s, times a random [1, 2)


@dataclass
class ApiSettings:
    """What the handlers need besides the registry (set by the composition root)."""

    clock: Clock
    bookmark_interval: float = 60.0
    watch_timeout: tuple[int, int] = DEFAULT_WATCH_TIMEOUT
    subresources: dict[tuple[str, str, str], SubresourceHandler] = field(default_factory=dict)
    security: Security | None = None  # authentication and authorization on (the auth room's chains)

    def add_subresource(self, group: str, resource: str, subresource: str, handler: SubresourceHandler) -> None:
        self.subresources[(group, resource, subresource)] = handler


# ---- query options ---------------------------------------------------------------------------------
def _int(query: Any, name: str, minimum: int = 0) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{raw[:40]}": invalid syntax for {name}') from None
    if value < minimum:
        message = f"Invalid value: {value}: must be greater than or equal to {minimum}"
        raise errors.invalid("ListOptions", "meta.k8s.io", "", [FieldError(name, message)])
    return value


def _bool(query: Any, name: str) -> bool | None:
    raw = query.get(name)
    if raw is None:
        return None
    if raw.lower() in ("1", "true", ""):
        return True
    if raw.lower() in ("0", "false"):
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{raw[:40]}": invalid syntax for {name}')


def list_options(query: Any, *, watch: bool) -> ListOptions:
    try:
        label = parse_label_selector(query.get("labelSelector", ""))
        fld = parse_field_selector(query.get("fieldSelector", ""))
    except SelectorError as e:
        raise errors.bad_request(str(e)) from None
    return ListOptions(label=label, field=fld, limit=_int(query, "limit") or 0,
                       continue_token=query.get("continue", ""), resource_version=query.get("resourceVersion", ""),
                       resource_version_match=query.get("resourceVersionMatch", ""), watch=watch,
                       allow_bookmarks=bool(_bool(query, "allowWatchBookmarks")),
                       send_initial_events=_bool(query, "sendInitialEvents"),
                       timeout_seconds=_int(query, "timeoutSeconds"))


def context(query: Any, kind: str) -> Context:
    """CreateOptions/UpdateOptions/PatchOptions from the query; 422 Invalid when malformed."""
    errs: list[FieldError] = []
    dry = query.getall("dryRun", [])
    if any(d != "All" for d in dry):
        bad = next(d for d in dry if d != "All")
        errs.append(FieldError("dryRun", f'Unsupported value: "{bad[:40]}": supported values: "All"'))
    manager = query.get("fieldManager", "")
    if len(manager) > MAX_FIELD_MANAGER:
        errs.append(FieldError("fieldManager", f"Too long: may not be more than {MAX_FIELD_MANAGER} bytes"))
    elif not manager.isprintable():
        errs.append(FieldError("fieldManager", "Invalid value: must only contain printable characters"))
    validation = query.get("fieldValidation", "") or "Warn"
    if validation not in ("Strict", "Warn", "Ignore"):
        errs.append(FieldError("fieldValidation", f'Unsupported value: "{validation[:40]}": supported values: '
                                                  '"Ignore", "Strict", "Warn"'))
    force = query.get("force")
    if force is not None and force not in ("true", "false"):
        errs.append(FieldError("force", f'Invalid value: "{force[:40]}": must be a boolean'))
    if errs:
        raise errors.invalid(kind, "meta.k8s.io", "", errs)
    return Context(dry_run=bool(dry), field_manager=manager, field_validation=validation,  # type: ignore[arg-type]
                   force=force == "true")


def request_context(request: web.Request, kind: str) -> Context:
    """The options of the request and who makes it."""
    ctx = context(request.query, kind)
    user = request_user(request)
    if user is not None:
        ctx.principal, ctx.user, ctx.groups = user, user.name, user.groups
    return ctx


def include_object(query: Any, output: Output) -> IncludeObject:
    raw = query.get("includeObject", "") or "Metadata"
    if raw not in ("Metadata", "Object", "None"):
        raise errors.bad_request(f'includeObject: Unsupported value: "{raw[:40]}": supported values: '
                                 '"None", "Metadata", "Object"')
    return raw  # type: ignore[return-value]


async def read_body(request: web.Request, *, media: str | None = None) -> Decoded:
    raw = await request.read()
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    if media is None and request.headers.get("Content-Type", "").split(";")[0].strip().lower() == protobuf.CONTENT_TYPE:
        try:
            return Decoded(protobuf.decode(raw))
        except protobuf.ProtobufError as e:
            raise errors.bad_request(f"error decoding the protobuf request body: {e}") from None
    ct = media or ("yaml" if body_type(request.headers.get("Content-Type", "")) == "yaml" else "json")
    try:
        if len(raw) > 64 * 1024:  # big bodies are decoded off the event loop
            return await asyncio.to_thread(decode, raw, f"application/{ct}")
        return decode(raw, f"application/{ct}")
    except DecodeError as e:
        raise errors.bad_request(f"error decoding the request body: {e}") from None


async def optional_body(request: web.Request) -> Any:
    if not request.can_read_body:
        return None
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return decode(raw, request.headers.get("Content-Type", "application/json")).value
    except DecodeError as e:
        raise errors.bad_request(f"error decoding the request body: {e}") from None


# ---- the entry point ------------------------------------------------------------------------------
async def handle(request: web.Request, ri: RequestInfo, registry: Registry,
                 settings: ApiSettings) -> web.StreamResponse:
    info = registry.catalog.get(ri.group, ri.version, ri.resource)
    if info is None or not ri.verb:
        raise errors.path_not_found()
    if not info.namespaced and ri.namespace and ri.resource != "namespaces":
        raise errors.path_not_found()
    namespace = ri.namespace if info.namespaced else None
    if info.namespaced and not namespace and ri.verb not in ("list", "watch", "deletecollection"):
        if ri.name:
            raise errors.path_not_found()
        raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
    if ri.subresource:
        return await _subresource(request, ri, info, registry, settings, namespace)
    verb = ri.verb
    if not info.allows(verb):
        raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
    review = registry.reviews.get((info.group, info.version, info.plural))
    if review is not None:
        if settings.security is not None and info.group == "authorization.k8s.io":  # the access reviews
            return await security_review(request, settings.security, info.kind)
        return await _review(request, review)
    gs = registry.stores[(info.group, info.version, info.plural)]
    if verb == "get":
        output = choose_output(request.headers.get("Accept"))
        obj = await gs.get(namespace, ri.name, request.query.get("resourceVersion", ""))
        return _one(gs, obj, output, request, settings)
    if verb == "list":
        return await _list(request, gs, namespace, settings)
    if verb == "watch":
        return await _watch(request, gs, namespace, settings)
    if verb == "create":
        ctx = request_context(request, "CreateOptions")
        obj = await gs.create(namespace, await read_body(request), ctx)
        return json_response(obj, 201, ctx.warnings)
    if verb == "update":
        ctx = request_context(request, "UpdateOptions")
        obj, created = await gs.update(namespace, ri.name, await read_body(request), ctx)
        return json_response(obj, 201 if created else 200, ctx.warnings)
    if verb == "patch":
        return await _patch(request, gs, namespace, ri.name, "")
    if verb == "delete":
        return await _delete(request, gs, namespace, ri.name)
    if verb == "deletecollection":
        opts = list_options(request.query, watch=False)
        ctx = request_context(request, "DeleteOptions")
        dopts = parse_delete_options(await optional_body(request), dict(request.query))
        ctx.dry_run = ctx.dry_run or dopts.dry_run
        result = await gs.delete_collection(namespace, opts, dopts, ctx)
        return json_response(list_object(gs, result), 200, ctx.warnings)
    raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def _one(gs: GenericStore, obj: dict[str, Any], output: Output, request: web.Request,
         settings: ApiSettings) -> web.Response:
    if output.table:
        include = include_object(request.query, output)
        return json_response(table_object(gs, [obj], obj["metadata"].get("resourceVersion", ""),
                                          settings.clock.wall(), include, output.table_version))
    return json_response(obj)


async def _list(request: web.Request, gs: GenericStore, namespace: str | None, settings: ApiSettings) -> web.Response:
    output = choose_output(request.headers.get("Accept"))
    opts = list_options(request.query, watch=False)
    if not output.table and not opts.filtered and gs.raw_lists:
        items, meta = await gs.list_raw(namespace, opts)
        if len(items) >= BIG_LIST:
            trim_malloc_soon()
        return web.Response(body=raw_list(gs, meta, items), headers={"Content-Type": "application/json"})
    if output.table:
        include = include_object(request.query, output)
        now = settings.clock.wall()
        rows, meta = await gs.list_as(namespace, opts, lambda obj: table_row_bytes(gs, obj, now, include))
        if len(rows) >= BIG_LIST:  # once the response is sent, what making it freed goes back to the system
            trim_malloc_soon()
        body = table_list(gs, rows, str(meta.revision), output.table_version,
                          continue_token=meta.continue_token, remaining=meta.remaining)
        return web.Response(body=body, headers={"Content-Type": "application/json"})
    result = await gs.list(namespace, opts)
    if len(result.items) >= BIG_LIST:
        trim_malloc_soon()
    return json_response(list_object(gs, result))


async def _watch(request: web.Request, gs: GenericStore, namespace: str | None,
                 settings: ApiSettings) -> web.StreamResponse:
    output = choose_output(request.headers.get("Accept"))
    include = include_object(request.query, output)
    opts = list_options(request.query, watch=True)
    try:
        start = await gs.watch(namespace, opts)  # errors here are HTTP errors (400, 422, 504)...
    except errors.StatusError as e:
        if e.code != 410:
            raise
        # ...but a too old resourceVersion is a 200 stream with one ERROR event, as the cacher answers
        return json_response_line(event_line("ERROR", e.status))
    sub = start.subscription
    loop = asyncio.get_running_loop()
    timeout = opts.timeout_seconds if opts.timeout_seconds else random.uniform(*settings.watch_timeout)
    deadline = loop.time() + timeout
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                   "Cache-Control": "no-cache, private"})
    resp.enable_chunked_encoding()
    encoder = WatchEncoder(gs, output.table_version if output.table else None, include, settings.clock.wall)
    try:
        await resp.prepare(request)
        if start.initial:
            await resp.write(b"".join(encoder.encode(item) for item in start.initial))
        if start.initial_end is not None:
            await resp.write(bookmark(gs, start.initial_end, initial_end=True))
        next_bookmark = loop.time() + settings.bookmark_interval
        while True:
            now = loop.time()
            if now >= deadline:
                break
            wait = min(deadline, next_bookmark) - now if opts.allow_bookmarks else deadline - now
            try:
                item = await sub.next(max(wait, 0.0))
            except StopAsyncIteration:
                if sub.error is not None:
                    await resp.write(event_line("ERROR", sub.error.status))
                break
            if item is None:
                if opts.allow_bookmarks and loop.time() >= next_bookmark:
                    await resp.write(bookmark(gs, sub.bookmark_revision()))
                    next_bookmark = loop.time() + settings.bookmark_interval
                continue
            chunk = [encoder.encode(item)]
            while not sub.queue.empty() and len(chunk) < 1000:  # everything already queued goes in one write
                more = sub.queue.get_nowait()
                if more is None:
                    sub.queue.put_nowait(None)
                    break
                chunk.append(encoder.encode(more))
                if more.change is not None:
                    sub.last_revision = max(sub.last_revision, more.change.revision)
            await resp.write(b"".join(chunk))
    except ConnectionResetError:
        return resp  # the client went (kubectl wait and get -w end so): nothing left to send or log
    finally:
        sub.close()
    with contextlib.suppress(ConnectionResetError):  # it may go between the last event and the end
        await resp.write_eof()
    return resp


def json_response_line(line: bytes) -> web.Response:
    return web.Response(body=line, status=200, headers={"Content-Type": "application/json"})


async def _patch(request: web.Request, gs: GenericStore, namespace: str | None, name: str,
                 subresource: str) -> web.Response:
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    patch_type = PATCH_CONTENT_TYPES.get(ctype)
    if patch_type is None:
        raise errors.unsupported_media_type(ctype, list(PATCH_CONTENT_TYPES))
    ctx = request_context(request, "PatchOptions")
    if patch_type != "apply" and request.query.get("force") is not None:
        raise errors.invalid("PatchOptions", "meta.k8s.io", "", [FieldError("force", "Forbidden: may not be "
                                                                                     "specified for non-apply patch")])
    body = await read_body(request, media="yaml" if patch_type == "apply" else "json")
    obj, created = await gs.patch(namespace, name, patch_type, body.value, ctx, subresource=subresource)
    return json_response(obj, 201 if created else 200, ctx.warnings)


async def _delete(request: web.Request, gs: GenericStore, namespace: str | None, name: str) -> web.Response:
    ctx = request_context(request, "DeleteOptions")
    opts = parse_delete_options(await optional_body(request), dict(request.query))
    ctx.dry_run = ctx.dry_run or opts.dry_run
    obj, gone = await gs.delete(namespace, name, opts, ctx)
    if gs.strategy.return_deleted_object or not gone:
        return json_response(obj, 200, ctx.warnings)
    details = {"name": name, "kind": gs.info.plural, "uid": obj["metadata"].get("uid", "")}
    if gs.info.group:
        details["group"] = gs.info.group
    return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                          "details": details}, 200, ctx.warnings)


async def _review(request: web.Request, review: ReviewStore) -> web.Response:
    ctx = request_context(request, "CreateOptions")
    obj = await review.create(None, (await read_body(request)).value, ctx)
    return json_response(obj, 201, ctx.warnings)


async def _subresource(request: web.Request, ri: RequestInfo, info: ResourceInfo, registry: Registry,
                       settings: ApiSettings, namespace: str | None) -> web.StreamResponse:
    sub = registry.catalog.subresource(info, ri.subresource)
    gs = registry.stores.get((info.group, info.version, info.plural))
    if sub is None or gs is None:
        raise errors.path_not_found()
    custom = settings.subresources.get((info.group, info.plural, ri.subresource))
    if custom is not None:
        return await custom(request, gs, ri, request_context(request, "CreateOptions"))
    verb = ri.verb
    if verb not in sub.verbs:
        raise errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
    if verb == "get":
        obj = await gs.get(namespace, ri.name, request.query.get("resourceVersion", ""))
        return _one(gs, obj, choose_output(request.headers.get("Accept")), request, settings)
    if verb == "update":
        ctx = request_context(request, "UpdateOptions")
        obj, _ = await gs.update(namespace, ri.name, await read_body(request), ctx, subresource=ri.subresource)
        return json_response(obj, 200, ctx.warnings)
    if verb == "patch":
        return await _patch(request, gs, namespace, ri.name, ri.subresource)
    raise errors.path_not_found()
