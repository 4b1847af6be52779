"""Probe I/O finished on the probes' grid: one look at every pending probe per 100 ms tick.

With the runner's coalescing (runner.py), the probes due in one window start in one wake-up of
the loop, but each then waited for its own readiness (the HTTP reply, the exec'd child's exit,
its pipe's EOF): an epoll registration, a future's callback and a wake-up of the loop per probe,
as the replies come back one by one. Here a probe hands a `check` (non-blocking: read what has
arrived, reap the child if it has ended; True when done) to the loop's poller, which calls every
pending check on the next multiple of the grid, the instant the next window's probes start, so
100 probes a second wake the loop about ten times, with no file descriptor registered at all.

A probe's result comes at most one grid step after its I/O completed (a probe already starts
up to a step late; results count per period of whole seconds). Exec hooks and `kubectl exec` wait
for their child's exit at once; httpGet hooks share the probes' HTTP client, so their reply is read
on the grid too (a hook's result up to 100 ms later).

Figures: bench/README.md, "Probe I/O polled on the grid".
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from nodeagent.agent.probes.runner import COALESCE_S, coalesced

Check = Callable[[], bool]  # True: done (its future is resolved); raising: the wait fails with it


class GridPoller:
    """The pending checks of one loop, and the one timer that runs them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, grid: float = COALESCE_S) -> None:
        self._loop = loop
        self._grid = grid
        self._pending: list[tuple[Check, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None

    def wait(self, check: Check) -> asyncio.Future[None]:
        """A future resolved at the first tick where `check()` says done (or fails with what it
        raised). Cancelling the future drops the check at the next tick."""
        fut = self._loop.create_future()
        self._pending.append((check, fut))
        if self._timer is None:
            self._arm()
        return fut

    def _arm(self) -> None:
        now = self._loop.time()
        when = coalesced(now, self._grid)
        if when <= now + 1e-6:  # on a grid point already (the tick that started the probe): the next one
            when = coalesced(now + self._grid / 2, self._grid)
        self._timer = self._loop.call_at(when, self._tick)

    def _tick(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, []
        for check, fut in pending:
            if fut.done():  # cancelled meanwhile
                continue
            try:
                done = check()
            except Exception as e:  # noqa: BLE001 - the waiter's error, raised where it awaits
                fut.set_exception(e)
                continue
            if done:
                fut.set_result(None)
            else:
                self._pending.append((check, fut))
        if self._pending:
            self._arm()


_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GridPoller] = weakref.WeakKeyDictionary()


def poller() -> GridPoller:
    """The running loop's poller (made on first use)."""
    loop = asyncio.get_running_loop()
    found = _pollers.get(loop)
    if found is None:
        found = _pollers[loop] = GridPoller(loop)
    return found


async def until(check: Check) -> None:
    """Wait until `check()` says done, looking once per grid tick (a first look right away is
    the caller's to make)."""
    fut = poller().wait(check)
    try:
        await fut
    finally:
        fut.cancel()
