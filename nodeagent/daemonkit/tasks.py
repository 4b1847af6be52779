"""Guarded background tasks: the one way a daemon starts a task that outlives the call starting it.

A bare `loop.create_task` has three traps: nothing keeps a reference (the loop holds tasks weakly,
so one can vanish mid-flight), an exception is only reported when the task is garbage-collected,
and shutdown has to find every task to cancel it. `GuardedTasks` keeps each task until it ends,
names it, logs `task_failed task=<name>` the moment it raises, and, for a task started with
`forever=True` (a loop that must never end: eviction, housekeeping, the watchdog), records the end
itself as a death in `problems()`, which the daemon's health check turns into a stopped watchdog.
`close()` cancels whatever still runs and waits for it, so a shutdown leaves nothing behind.

Written here rather than using `asyncio.TaskGroup` (3.11): a TaskGroup cancels every sibling when
one task fails and only lives inside one `async with` block, while a daemon wants one failure to be
reported and contained, and tasks started from callbacks (a SIGHUP, a pod status change).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")


class GuardedTasks:
    """Named tasks kept until they end; failures logged at once and, for loops, surfaced."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        self._forever: set[asyncio.Task[Any]] = set()
        self._died: dict[str, str] = {}  # name of a forever task -> how it ended
        self._closing = False

    def start(self, coro: Coroutine[Any, Any, T], *, name: str, forever: bool = False) -> asyncio.Task[T]:
        """Run `coro` as a task named `name` on the running loop and keep it until it ends.

        `forever`: the task is a loop that only ends by cancellation; ending any other way (an
        exception, or returning) is a death that `problems()` reports until the group is closed.
        """
        if self._closing:
            coro.close()
            raise RuntimeError(f"{self.owner}: cannot start {name!r}, the tasks are being closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        if forever:
            self._forever.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        forever = task in self._forever
        self._forever.discard(task)
        if task.cancelled():
            if forever and not self._closing:
                self._died[task.get_name()] = "cancelled"
                log.error("task_died", owner=self.owner, task=task.get_name(), reason="cancelled")
            return
        error = task.exception()
        if error is not None:
            log.error("task_failed", owner=self.owner, task=task.get_name(), error=repr(error),
                      exc_info=(type(error), error, error.__traceback__))
            if forever:
                self._died[task.get_name()] = repr(error)
        elif forever and not self._closing:
            self._died[task.get_name()] = "returned"
            log.error("task_died", owner=self.owner, task=task.get_name(), reason="returned")

    def problems(self) -> list[str]:
        """One line per loop that ended while it should still run (empty: all alive)."""
        return [f"task {name} died: {how}" for name, how in sorted(self._died.items())]

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait until every task started so far, and every task those start meanwhile, has ended."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        """Cancel every task still running and wait for each to end (shutdown). A task that
        swallows its cancellation is waited for as well; exceptions were logged by `_ended`."""
        self._closing = True
        await self.cancel_running()

    async def cancel_running(self) -> None:
        """Cancel the tasks running now and wait for each to end; the group stays open (a
        loop cancelled here is reported as dead unless the group is closing)."""
        pending = list(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
