"""What the registry calls in the rooms beside it, as small protocols (so each plugs in).

- Patcher: JSON patch, merge patch, strategic merge patch and server-side apply (cluster/patch/).
- FieldManager: metadata.managedFields for every write (cluster/patch/, structured-merge-diff).
- FieldValidator: the unknown fields of a body against the kind's schema (cluster/schema/), for
  fieldValidation=Strict|Warn|Ignore.
- Admitter: admission plugins in Kubernetes' order (cluster/admission/): may mutate, may refuse
  with a StatusError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.options import Context
from nodeagent.core.errors import FieldError

PatchType = Literal["json", "merge", "strategic", "apply"]
PATCH_CONTENT_TYPES: dict[str, PatchType] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}
Operation = Literal["CREATE", "UPDATE", "DELETE"]


class PatchError(ValueError):
    """A patch that cannot be applied (the API answers 422 Invalid, or 400 for a malformed one)."""

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


class ApplyConflict(ValueError):
    """Server-side apply refused: other managers own these fields (409 Conflict, FieldManagerConflict)."""

    def __init__(self, message: str, causes: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.causes = causes  # {"reason": "FieldManagerConflict", "message": ..., "field": ".spec.x"}


class Patcher(Protocol):
    def patch(self, patch_type: PatchType, current: dict[str, Any] | None, patch: Any, info: ResourceInfo, *,
              field_manager: str, force: bool, subresource: str = "") -> dict[str, Any]:
        """The object after the patch (current is None only for apply, which creates)."""
        ...


class FieldManager(Protocol):
    def update(self, old: dict[str, Any] | None, new: dict[str, Any], info: ResourceInfo, *, manager: str,
               subresource: str) -> dict[str, Any]:
        """`new` with metadata.managedFields recording what `manager` set (operation Update)."""
        ...


@dataclass(frozen=True)
class FieldCheck:
    """A body checked against its kind's schema."""

    value: Any  # the body as typed decoding keeps it (unknown fields dropped)
    warnings: tuple[str, ...] = ()  # Warn: `Warning: 299` texts (unknown/duplicate fields)
    strict_error: str | None = None  # Strict: the 400 message (`strict decoding error: unknown field "x"`)
    errors: tuple[FieldError, ...] = ()  # values of the wrong type: 422 Invalid


class FieldValidator(Protocol):
    def check(self, body: Any, info: ResourceInfo, mode: str) -> FieldCheck:
        """Check a decoded request body (or a patched object) of `info`'s kind under fieldValidation `mode`."""
        ...


class Admitter(Protocol):
    async def admit(self, operation: Operation, info: ResourceInfo, obj: dict[str, Any],
                    old: dict[str, Any] | None, *, subresource: str, ctx: Context) -> None:
        """Mutate `obj` in place or raise StatusError (ctx: who asks, dry run)."""
        ...
