"""client-go flowcontrol.Backoff with an injected clock: per-key delays that double from
`initial` up to `cap`, forgotten after 2*cap without a failure. In-memory state a loop owns."""

from __future__ import annotations


class Backoff:
    def __init__(self, initial: float, cap: float) -> None:
        self.initial, self.cap = initial, cap
        self._entries: dict[str, tuple[float, float]] = {}  # key -> (delay, last update)

    def get(self, key: str) -> float:
        e = self._entries.get(key)
        return 0.0 if e is None else e[0]

    def next(self, key: str, now: float) -> None:
        e = self._entries.get(key)
        if e is None or now - e[1] > 2 * self.cap:
            self._entries[key] = (self.initial, now)
        else:
            self._entries[key] = (min(e[0] * 2, self.cap), now)

    def in_backoff_since_update(self, key: str, now: float) -> bool:
        e = self._entries.get(key)
        return e is not None and now - e[1] < e[0]

    def gc(self, now: float) -> None:
        for k in [k for k, (_, t) in self._entries.items() if now - t > 2 * self.cap]:
            del self._entries[k]
