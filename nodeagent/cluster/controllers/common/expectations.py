"""ControllerExpectations / UIDTrackingControllerExpectations (controller_utils.go), clock injected.

A loop records the creates and deletes it issued; until the informer has shown them all (or five
minutes have passed: ExpectationsTimeout) the controller does not create or delete again, so a
slow cache never makes it over-create. In-memory state owned by the loop; every method takes
`now` instead of reading a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXPECTATIONS_TIMEOUT = 5 * 60.0


@dataclass(slots=True)
class _Record:
    add: int = 0
    delete: int = 0
    timestamp: float = 0.0
    deleting_keys: set[str] = field(default_factory=set)


class Expectations:
    def __init__(self, timeout: float = EXPECTATIONS_TIMEOUT) -> None:
        self._timeout = timeout
        self._records: dict[str, _Record] = {}

    def satisfied(self, key: str, now: float) -> bool:
        """SatisfiedExpectations: no record (a new controller), fulfilled, or expired."""
        r = self._records.get(key)
        if r is None:
            return True
        if r.add <= 0 and r.delete <= 0:
            return True
        return now - r.timestamp > self._timeout

    def expect_creations(self, key: str, count: int, now: float) -> None:
        self._records[key] = _Record(add=count, timestamp=now)

    def expect_deletions(self, key: str, pod_keys: list[str], now: float) -> None:
        self._records[key] = _Record(delete=len(pod_keys), timestamp=now, deleting_keys=set(pod_keys))

    def creation_observed(self, key: str) -> None:
        r = self._records.get(key)
        if r is not None:
            r.add -= 1

    def deletion_observed(self, key: str, pod_key: str | None = None) -> None:
        """A delete seen once per pod key (a pod seen with a deletionTimestamp and then gone counts once)."""
        r = self._records.get(key)
        if r is None:
            return
        if pod_key is not None:
            if pod_key not in r.deleting_keys:
                return
            r.deleting_keys.discard(pod_key)
        r.delete -= 1

    def delete(self, key: str) -> None:
        self._records.pop(key, None)

    def pending(self, key: str) -> tuple[int, int]:
        r = self._records.get(key)
        return (0, 0) if r is None else (max(r.add, 0), max(r.delete, 0))

    def set_expectations(self, key: str, add: int, pod_keys: list[str], now: float) -> None:
        """SetExpectations: creates and deletes of one sync at once (a DaemonSet does both)."""
        self._records[key] = _Record(add=add, delete=len(pod_keys), timestamp=now, deleting_keys=set(pod_keys))

    def lower_expectations(self, key: str, add: int, delete: int) -> None:
        """LowerExpectations: creates or deletes that were never attempted (a slow start cut short)."""
        r = self._records.get(key)
        if r is not None:
            r.add -= add
            r.delete -= delete
