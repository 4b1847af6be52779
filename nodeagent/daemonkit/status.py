"""Kubernetes `Status` error responses, and the middleware that turns every failure into one.

Clients (kubectl-like tools, scripts) get the same JSON shape for every error, and an unexpected
exception is logged and answered with 500 while the server keeps serving.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from aiohttp import web

from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

_REASONS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "AlreadyExists",
            413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
            500: "InternalError"}


class StatusError(Exception):
    """Raised by handlers to answer with a Status object (`body()`, HTTP status `code`).

    The one Status error type: the control plane's kinds (cluster/registry/errors.py's, with
    apimachinery's argument order and body, and the legacy scheduler API's ApiError) subclass it
    and render their own `body()`.
    """

    def __init__(self, code: int, message: str, reason: str | None = None,
                 causes: Sequence[dict[str, str]] = (), name: str | None = None, kind: str = "pods") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.causes = list(causes)
        self.name = name
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """The Status object that answers this error."""
        return status_body(self.code, self.message, self.reason, self.causes, self.name, self.kind)


def invalid(kind_title: str, name: str, errors: Sequence[FieldError], *, kind: str = "pods") -> StatusError:
    """The API server's answer to an object that fails validation (apierrors.NewInvalid): 422,
    reason Invalid, `<Kind> "<name>" is invalid: <field>: <message>; ...`, one cause per field."""
    causes = [{"reason": "FieldValueInvalid", "field": e.path, "message": e.message} for e in errors]
    detail = "; ".join(str(e) for e in errors)
    return StatusError(422, f'{kind_title} "{name}" is invalid: {detail}', "Invalid", causes, name or None, kind)


def status_body(code: int, message: str, reason: str | None = None,
                causes: Sequence[dict[str, str]] = (), name: str | None = None,
                kind: str = "pods") -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message,
                            "reason": reason or _REASONS.get(code, "Unknown"), "code": code}
    details: dict[str, Any] = {}
    if name:
        details.update(name=name, kind=kind)
    if causes:
        details["causes"] = list(causes)
    if details:
        body["details"] = details
    return body


def status_response(err: StatusError) -> web.Response:
    return web.json_response(err.body(), status=err.code)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def status_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except StatusError as e:
        return status_response(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = e.text if e.status == 413 and e.text else e.reason
        if e.status == 404:
            message = f"the server could not find the requested resource ({request.path})"
        elif e.status == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        return status_response(StatusError(e.status, message))
    except Exception:
        log.exception("api_unhandled_error", method=request.method, path=request.path)
        return status_response(StatusError(500, "internal error; see the agent log"))
