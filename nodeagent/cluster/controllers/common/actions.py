"""The actions a controller's decision returns and its thin loop executes, in order.

Each names its target by an `ObjectRef` (with the uid the action was decided against, sent as the
delete/patch precondition) so an action never hits a recreated object of the same name. A loop that
fails an action stops the ones after it in the same plan unless the plan says otherwise (slow start
stops a burst at its first failed batch, as upstream's slowStartBatch does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Obj = dict[str, Any]
PatchType = Literal["strategic", "merge", "json"]
Propagation = Literal["Background", "Foreground", "Orphan"]

SLOW_START_INITIAL_BATCH_SIZE = 1  # controller.SlowStartInitialBatchSize


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], api_version: str = "", kind: str = "") -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(obj.get("apiVersion") or api_version),
            str(obj.get("kind") or kind),
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True, slots=True)
class Create:
    """POST `obj` (a full object; `metadata.generateName` or `name` set by the controller)."""

    obj: Obj
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Delete:
    """DELETE with preconditions uid (and resourceVersion when given).

    `verify_absent`: owners the decision found missing in the cache; the loop re-reads each (an
    uncached GET, as upstream's garbage collector does) and skips the delete if any exists with the
    referenced uid, so a stale cache never deletes a live object's dependents.
    """

    ref: ObjectRef
    propagation: Propagation | None = None
    resource_version: str | None = None
    grace_period_seconds: int | None = None
    verify_absent: tuple[ObjectRef, ...] = ()
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Patch:
    """PATCH `patch` (a strategic merge patch unless said otherwise) on the object or a subresource."""

    ref: ObjectRef
    patch: Obj
    patch_type: PatchType = "strategic"
    subresource: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Update:
    """PUT the whole object, with its resourceVersion (409 on a stale read: requeue)."""

    obj: Obj
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UpdateStatus:
    """PUT `obj` to the status subresource (its resourceVersion makes it a compare-and-swap)."""

    obj: Obj
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Event:
    ref: ObjectRef
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Requeue:
    """Sync this key again after `after` seconds (0: now, rate-limited)."""

    after: float


@dataclass(frozen=True, slots=True)
class SlowStart:
    """Creates in batches of 1, 2, 4, ... (upstream's slowStartBatch): the loop runs one batch
    concurrently, and stops at the first batch with a failure; the creates never attempted must be
    taken back from the expectations (`skipped(n)`)."""

    creates: tuple[Create, ...]
    initial: int = SLOW_START_INITIAL_BATCH_SIZE

    def batches(self) -> Iterator[tuple[Create, ...]]:
        start, size = 0, min(self.initial, len(self.creates))
        while size > 0:
            yield self.creates[start : start + size]
            start += size
            size = min(2 * size, len(self.creates) - start)


def batch_sizes(count: int, initial: int = SLOW_START_INITIAL_BATCH_SIZE) -> list[int]:
    """The batch sizes slowStartBatch uses for `count` calls: 1, 2, 4, ..., then the remainder."""
    out: list[int] = []
    size, remaining = min(count, initial), count
    while size > 0:
        out.append(size)
        remaining -= size
        size = min(2 * size, remaining)
    return out


Action = Create | Delete | Patch | Update | UpdateStatus | Event | Requeue | SlowStart


@dataclass(slots=True)
class Plan:
    """A decision: its actions in order, and when to look again (None: only on the next event)."""

    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None

    def add(self, action: Action) -> None:
        self.actions.append(action)

    def requeue(self, after: float) -> None:
        """Keep the earliest requeue asked for."""
        after = max(0.0, after)
        if self.requeue_after is None or after < self.requeue_after:
            self.requeue_after = after

    def of_type(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]
