"""The kubelet's image pull back-off: 10 s, doubling, at most 300 s (pure, injectable clock).

The kubelet keys a client-go flowcontrol.Backoff by pod and image (backOffPeriod 10 s,
MaxContainerBackOff 300 s). A failed pull calls Next: the first failure (or one after the entry
expired) waits 10 s, each further failure doubles the wait up to 300 s. While
`now - last failure < delay` the container shows ImagePullBackOff and no pull is tried; after
that the next attempt pulls again. An entry expires (the curve starts again at 10 s) when no
failure happened for 2 x 300 s. A successful pull forgets the key (the kubelet leaves the entry
to expire; forgetting it is the same for every later attempt, which starts at 10 s either way
once the entry would have expired, and sooner otherwise: a working registry is not punished for
an old failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core.clock import Clock

INITIAL_S = 10.0
MAX_S = 300.0


def backoff_delay(failures: int, initial: float = INITIAL_S, maximum: float = MAX_S) -> float:
    """The wait after `failures` consecutive failed pulls: 0, 10, 20, 40, 80, 160, 300, 300, ..."""
    if failures <= 0:
        return 0.0
    return float(min(initial * 2.0 ** min(failures - 1, 62), maximum))


@dataclass
class _Entry:
    failures: int
    last_failure: float


class PullBackoff:
    """Back-off state for every (pod, image) key; times are the clock's monotonic seconds."""

    def __init__(self, clock: Clock, initial: float = INITIAL_S, maximum: float = MAX_S) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"back-off: need 0 < initial ({initial}) <= maximum ({maximum})")
        self.clock = clock
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def _live(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and self.clock.now() - entry.last_failure > 2 * self.maximum:
            del self._entries[key]
            return None
        return entry

    def delay(self, key: str) -> float:
        """The current back-off period of `key` (0 when there is none)."""
        entry = self._live(key)
        return backoff_delay(entry.failures, self.initial, self.maximum) if entry else 0.0

    def remaining(self, key: str) -> float:
        """Seconds before another pull of `key` may be tried; 0: try now."""
        entry = self._live(key)
        if entry is None:
            return 0.0
        left = entry.last_failure + backoff_delay(entry.failures, self.initial, self.maximum) - self.clock.now()
        return max(left, 0.0)

    def in_backoff(self, key: str) -> bool:
        return self.remaining(key) > 0

    def failed(self, key: str) -> float:
        """Record a failed pull; returns the new back-off period."""
        entry = self._live(key)
        if entry is None:
            entry = self._entries[key] = _Entry(0, 0.0)
        entry.failures += 1
        entry.last_failure = self.clock.now()
        return backoff_delay(entry.failures, self.initial, self.maximum)

    def succeeded(self, key: str) -> None:
        self._entries.pop(key, None)

    def gc(self) -> None:
        """Drop expired entries (the kubelet's backOff.GC), so keys of gone pods do not pile up."""
        for key in list(self._entries):
            self._live(key)


def backoff_key(pod_uid: str, image: str) -> str:
    """The kubelet's key: the pod and the image as written."""
    return f"{pod_uid}_{image}"


__all__ = ["INITIAL_S", "MAX_S", "PullBackoff", "backoff_delay", "backoff_key"]
