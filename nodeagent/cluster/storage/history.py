"""The events of recent revisions, kept in memory: one tuple of events per revision.

Every revision has at least one event (only transactions that write take a revision), so the batch
of revision r is at index r - first: watchers and old-revision reads find their place in O(1).
Reads at an old revision R undo the events after R: a key's state at R is the prev_kv of its first
event after R (None if it was created after R); keys without a later event are as they are now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nodeagent.cluster.storage.interface import Event, KeyValue


class History:
    def __init__(self, first: int) -> None:
        self.first = first  # the revision of _batches[0]; the next revision when empty
        self._batches: list[tuple[Event, ...]] = []

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def last(self) -> int:
        """The newest revision held (first - 1 when empty)."""
        return self.first + len(self._batches) - 1

    def append(self, revision: int, events: tuple[Event, ...]) -> None:
        if revision != self.first + len(self._batches):
            raise AssertionError(f"history: revision {revision} after {self.last}")
        self._batches.append(events)

    def batch(self, revision: int) -> tuple[Event, ...]:
        return self._batches[revision - self.first]

    def batches(self, start: int, stop: int) -> Sequence[tuple[Event, ...]]:
        """The batches of revisions [start, stop)."""
        return self._batches[start - self.first:stop - self.first]

    def drop_through(self, revision: int) -> None:
        """Forget the revisions <= revision."""
        n = min(len(self._batches), revision - self.first + 1)
        if n > 0:
            del self._batches[:n]
            self.first += n

    def trim(self, keep: int) -> None:
        """Keep about the last `keep` revisions (deletes in chunks of keep/8: amortised O(1))."""
        if len(self._batches) > keep + max(1, keep // 8):
            self.drop_through(self.last - keep)

    def covers(self, revision: int) -> bool:
        """Whether the state at `revision` can be rebuilt from here (every later event is held)."""
        return revision >= self.first - 1

    def changed_since(self, revision: int, contains: Callable[[str], bool]) -> dict[str, KeyValue | None]:
        """Keys (those `contains` accepts) written after `revision`, each with its state at `revision`."""
        out: dict[str, KeyValue | None] = {}
        for events in self._batches[revision + 1 - self.first:]:
            for ev in events:
                key = ev.kv.key
                if key not in out and contains(key):
                    out[key] = ev.prev_kv
        return out
