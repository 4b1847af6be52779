"""Progress of a daemon's components, as its systemd watchdog needs to know it.

A watchdog that pings whenever the event loop runs only catches a blocked loop; a component can
wedge while the loop is fine (an eviction pass awaiting a kill that never completes, a thread
stuck in a cgroup write the loop awaits). So each component states what progress means for it,
in one of two shapes, and `ProgressMonitor` asks them all before each ping:

- `Heartbeat`: a loop that completes a cycle at least every `bound` seconds (`beat()` per cycle);
  stale when the last cycle ended longer ago than that.
- `Steps`: work in flight that finishes within a bound of its own (`with steps.step(what, bound)`);
  overdue when a step is still open past its bound. Waiting that may legitimately last (a
  container running, a crash-loop back-off) is not a step.

Time comes from the injected Clock (monotonic `now()`), so bounds are tested without sleeping.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

Check = Callable[[], list[str]]  # one line per reason the component is not making progress


class Heartbeat:
    """The end of a loop's last cycle; `stale()` once none ended within `bound` seconds."""

    def __init__(self, clock: Clock, what: str, bound: float) -> None:
        if bound <= 0:
            raise ValueError(f"bound: must be positive, got {bound}")
        self.clock = clock
        self.what = what
        self.bound = bound
        self.last = clock.now()

    def beat(self) -> None:
        self.last = self.clock.now()

    def stale(self) -> list[str]:
        age = self.clock.now() - self.last
        if age <= self.bound:
            return []
        return [f"{self.what}: no cycle completed for {age:.1f}s (bound {self.bound:.1f}s)"]


@dataclass(frozen=True)
class _Open:
    what: str
    started: float
    bound: float


class Steps:
    """Steps in flight, each with the time it may take; `overdue()` names those past it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._open: dict[int, _Open] = {}
        self._ids = itertools.count()

    @contextmanager
    def step(self, what: str, bound: float) -> Iterator[None]:
        """Mark the block as a step that finishes within `bound` seconds (also across awaits)."""
        key = next(self._ids)
        self._open[key] = _Open(what, self.clock.now(), bound)
        try:
            yield
        finally:
            del self._open[key]

    def __len__(self) -> int:
        return len(self._open)

    def overdue(self) -> list[str]:
        now = self.clock.now()
        return [f"{s.what}: running for {now - s.started:.1f}s (bound {s.bound:.1f}s)"
                for s in self._open.values() if now - s.started > s.bound]


class ProgressMonitor:
    """Every component's progress check in one; `healthy()` is the watchdog's question.

    Logs `progress_stalled component=... reasons=...` when a component stops making progress and
    `progress_resumed component=...` when it starts again (state changes, not every ping).
    """

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self._stalled: dict[str, list[str]] = {}

    def add(self, component: str, check: Check) -> None:
        self._checks[component] = check

    def problems(self) -> dict[str, list[str]]:
        """{component: reasons} for every component not making progress; a check that raises
        counts as not making progress."""
        out: dict[str, list[str]] = {}
        for name, check in self._checks.items():
            try:
                reasons = check()
            except Exception as e:  # noqa: BLE001 - a broken check must stop the pings, not the loop
                reasons = [f"progress check failed: {e!r}"]
            if reasons:
                out[name] = reasons
        return out

    def healthy(self) -> bool:
        problems = self.problems()
        for name, reasons in problems.items():
            if self._stalled.get(name) is None:
                log.error("progress_stalled", component=name, reasons=reasons)
        for name in self._stalled.keys() - problems.keys():
            log.info("progress_resumed", component=name)
        self._stalled = problems
        return not problems
