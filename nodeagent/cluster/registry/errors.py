"""API errors as metav1.Status: Kubernetes' reasons, codes and wording (apimachinery api/errors).

The registry raises StatusError; the HTTP layer renders `.status` as the body and `.code` as the
HTTP status. Messages are kube-apiserver's, word for word where clients parse or show them
(kubectl prints `Error from server (<reason>): <message>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nodeagent.cluster.schema.validation import CausedFieldError
from nodeagent.core.errors import FieldError
from nodeagent.daemonkit import status


class StatusError(status.StatusError):
    """A failed API call: `status` is the metav1.Status body, `code` the HTTP status. Arguments in
    apimachinery's order (code, reason, message, details); the details' name, kind and causes are
    also the base class's fields."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        details = details or {}
        super().__init__(code, message, reason, details.get("causes", ()), details.get("name"),
                         details.get("kind", ""))
        self.details = details

    @property
    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body

    def body(self) -> dict[str, Any]:
        return self.status


def qualified(resource: str, group: str) -> str:
    """schema.GroupResource.String(): `pods`, `deployments.apps`."""
    return f"{resource}.{group}" if group else resource


def _details(resource: str, group: str, name: str, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = resource
    d.update(extra)
    return d


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{qualified(resource, group)} "{name}" not found',
                       _details(resource, group, name))


def already_exists(resource: str, group: str, name: str) -> StatusError:
    return StatusError(409, "AlreadyExists", f'{qualified(resource, group)} "{name}" already exists',
                       _details(resource, group, name))


def conflict(resource: str, group: str, name: str, why: str) -> StatusError:
    return StatusError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(resource, group)} '
                                        f'"{name}": {why}', _details(resource, group, name))


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def stale(resource: str, group: str, name: str) -> StatusError:
    """An update with an old resourceVersion (optimistic concurrency)."""
    return conflict(resource, group, name, MODIFIED)


_CAUSE_REASONS = (("Required value", "FieldValueRequired"), ("Invalid value", "FieldValueInvalid"),
                  ("Unsupported value", "FieldValueNotSupported"), ("Duplicate value", "FieldValueDuplicate"),
                  ("Forbidden", "FieldValueForbidden"), ("Too long", "FieldValueTooLong"),
                  ("Too many", "FieldValueTooMany"), ("Not found", "FieldValueNotFound"))


def cause_reason(message: str) -> str:
    for prefix, reason in _CAUSE_REASONS:
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def invalid(kind: str, group: str, name: str, errors: Iterable[FieldError]) -> StatusError:
    """422 Invalid: `Pod "x" is invalid: spec.x: Invalid value: ...` with details.causes[]."""
    errs = list(errors)
    causes = [{"reason": e.reason if isinstance(e, CausedFieldError) else cause_reason(e.message), "message": e.message,
               "field": e.path} for e in errs]
    parts = [f"{e.path}: {e.message}" if e.path else e.message for e in errs]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qual = f"{kind}.{group}" if group else kind
    return StatusError(422, "Invalid", f'{qual} "{name}" is invalid: {text}',
                       _details(kind, group, name, causes=causes))


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def forbidden(resource: str, group: str, name: str, why: str) -> StatusError:
    what = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    return StatusError(403, "Forbidden", f"{what} is forbidden: {why}", _details(resource, group, name))


def method_not_supported(resource: str, group: str, verb: str) -> StatusError:
    return StatusError(405, "MethodNotAllowed", f"{verb} is not supported on resources of kind "
                                                f'"{qualified(resource, group)}"',
                       _details(resource, group, ""))


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def too_old(requested: int, compacted: int) -> StatusError:
    return gone(f"too old resource version: {requested} ({compacted})")


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list.")


def too_large(requested: int, current: int) -> StatusError:
    """504 for a resourceVersion the store has not reached (storage.NewTooLargeResourceVersionError)."""
    return StatusError(504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
                       {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": 1})


def internal(message: str) -> StatusError:
    return StatusError(500, "InternalError", f"Internal error occurred: {message}",
                       {"causes": [{"message": message}]})


def unavailable(message: str) -> StatusError:
    return StatusError(503, "ServiceUnavailable", message)


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> StatusError:
    return StatusError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format - accepted media types include: "
                       f"{', '.join(accepted)}")


def not_acceptable(accepted: Sequence[str]) -> StatusError:
    return StatusError(406, "NotAcceptable", "only the following media types are accepted: " + ", ".join(accepted))


def request_too_large(limit: int) -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def path_not_found() -> StatusError:
    """Unknown paths: kube-apiserver's 404 body (kubectl shows "the server could not find the requested resource")."""
    return StatusError(404, "NotFound", "the server could not find the requested resource")
