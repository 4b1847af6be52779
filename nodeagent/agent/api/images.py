"""The agent API's image routes (`nodeagent image pull|import|ls|rm` talk to these).

    GET    /api/v1/images                 ImageList (id, repoTags, repoDigests, size, lastUsed, inUseBy ...)
    GET    /api/v1/images/pulls           pulls in flight: image, phase, bytesDone/bytesTotal, seconds
    POST   /api/v1/images/pull            {"image": REF, "policy": "Always"|"IfNotPresent"|"Never"} -> 201 Image
    POST   /api/v1/images/import          {"path": ABS, "format": "oci"|"docker-archive", "tag": REF,
                                           "ref": NAME (picks one image of a layout holding several)} -> 201 Image
    POST   /api/v1/images/gc              one image GC pass now -> 200 {removed, bytesFreed, bytesToFree}
    GET    /api/v1/images/{name}          one image by reference or id (prefix)
    DELETE /api/v1/images/{name}          remove it -> 200 Image | 404 | 409 (in use)

A 201 means the image record is on disk (fsynced): the image exists. A pull that fails answers
with a Status naming the kubelet reason (`ErrImagePull` ...) and the registry's message; a bad
reference is 422 Invalid with the field. Wiring (daemon): `add_image_routes(app, manager)` after
`create_app`, with the same authentication (writes need the Unix socket or credentials).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from aiohttp import web

from nodeagent.agent.images import errors as E
from nodeagent.agent.images.listing import image_object
from nodeagent.agent.images.manager import GCResult
from nodeagent.agent.images.records import ImageRecord
from nodeagent.core.errors import FieldError
from nodeagent.core.waits import wait_for
from nodeagent.daemonkit.body import decode_body
from nodeagent.daemonkit.status import StatusError

PULL_TIMEOUT_S = 3600.0


class ImageBackend(Protocol):
    """What the routes need (ImageManager implements it)."""

    def images(self) -> list[ImageRecord]: ...

    def get(self, text: str) -> ImageRecord: ...

    async def pull(self, image: str, policy: str = "Always", *, field_path: str = "image") -> ImageRecord: ...

    async def import_image(self, path: str, fmt: str, tag: str | None = None,
                           ref_name: str | None = None) -> ImageRecord: ...

    async def remove(self, text: str) -> ImageRecord: ...

    async def garbage_collect(self) -> GCResult: ...

    def progress(self) -> list[dict[str, Any]]: ...

    def holders(self, image_id: str) -> list[str]: ...


IMAGES: web.AppKey[ImageBackend] = web.AppKey("images", ImageBackend)


def _backend(request: web.Request) -> ImageBackend:
    return request.app[IMAGES]


def _object(request: web.Request, record: ImageRecord) -> dict[str, Any]:
    holders = _backend(request).holders(record.id)
    return {"apiVersion": "nodeagent.io/v1alpha1", "kind": "Image", **image_object(record, holders)}


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = await asyncio.to_thread(decode_body, raw, request.content_type)
    except ValueError as e:
        raise StatusError(400, str(e)) from None
    if not isinstance(data, dict):
        raise StatusError(400, "the body must be a JSON object")
    return data


def _string(data: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        if required:
            raise _invalid(FieldError(key, "Required value"))
        return None
    if not isinstance(value, str):
        raise _invalid(FieldError(key, f"must be a string, got {type(value).__name__}"))
    return value


def _invalid(e: FieldError) -> StatusError:
    return StatusError(422, str(e), reason="Invalid",
                       causes=[{"reason": "FieldValueInvalid", "field": e.path, "message": e.message}])


def _image_error(e: E.ImageError) -> StatusError:
    code = 404 if isinstance(e, E.ImageNotFound) else 422 if isinstance(e, E.InvalidImageName) else 502
    if isinstance(e, E.NoSpace):
        code = 507
    return StatusError(code, f"{e.reason}: {e.message}", reason=e.reason)


async def list_images(request: web.Request) -> web.Response:
    items = [_object(request, r) for r in _backend(request).images()]
    return web.json_response({"apiVersion": "nodeagent.io/v1alpha1", "kind": "ImageList", "items": items})


async def list_pulls(request: web.Request) -> web.Response:
    return web.json_response({"kind": "ImagePullList", "items": _backend(request).progress()})


async def pull_image(request: web.Request) -> web.Response:
    data = await _body(request)
    image = _string(data, "image")
    policy = _string(data, "policy", required=False) or "Always"
    assert image is not None
    try:
        record = await wait_for(_backend(request).pull(image, policy), PULL_TIMEOUT_S)
    except FieldError as e:
        raise _invalid(e) from None
    except E.ImageError as e:
        raise _image_error(e) from None
    except TimeoutError:
        raise StatusError(504, f"pulling {image} took longer than {PULL_TIMEOUT_S:g}s") from None
    return web.json_response(_object(request, record), status=201)


async def import_image(request: web.Request) -> web.Response:
    data = await _body(request)
    path = _string(data, "path")
    fmt = _string(data, "format", required=False) or "oci"
    tag = _string(data, "tag", required=False)
    ref_name = _string(data, "ref", required=False)
    assert path is not None
    try:
        record = await _backend(request).import_image(path, fmt, tag, ref_name)
    except FieldError as e:
        raise _invalid(e) from None
    except E.ImageError as e:
        raise _image_error(e) from None
    return web.json_response(_object(request, record), status=201)


async def get_image(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        record = _backend(request).get(name)
    except E.NotPresent as e:
        raise StatusError(404, str(e)) from None
    return web.json_response(_object(request, record))


async def delete_image(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        record = await _backend(request).remove(name)
    except E.NotPresent as e:
        raise StatusError(404, str(e)) from None
    except E.InUse as e:
        raise StatusError(409, str(e), reason="Conflict") from None
    return web.json_response(_object(request, record))


async def run_gc(request: web.Request) -> web.Response:
    result = await _backend(request).garbage_collect()
    return web.json_response({"kind": "ImageGCResult", **result.to_dict()})


def add_image_routes(app: web.Application, backend: ImageBackend) -> None:
    """Add the routes to the agent's application (before it is started)."""
    app[IMAGES] = backend
    app.router.add_get("/api/v1/images", list_images)
    app.router.add_get("/api/v1/images/pulls", list_pulls)
    app.router.add_post("/api/v1/images/pull", pull_image)
    app.router.add_post("/api/v1/images/import", import_image)
    app.router.add_post("/api/v1/images/gc", run_gc)
    app.router.add_get("/api/v1/images/{name:.+}", get_image)
    app.router.add_delete("/api/v1/images/{name:.+}", delete_image)


__all__ = ["IMAGES", "ImageBackend", "add_image_routes"]
