"""The loop of one probe: wait for the schedule, run the executor, feed the state, report.

One asyncio task per probe (the kubelet runs one goroutine per probe worker). The runner holds
no policy: `ProbeState` decides, the executor does the I/O, `on_step` receives every step that
published a result or has events (the owner turns them into container readiness, events and a
kill). Time comes from the injected clock and waiting from the injected timer (the loop's
call_at by default: one timer handle and one future per wait, no task, as 100 pods with 1 s
probes make 100+ waits a second), so a test drives it on a fake clock without sleeping.

The default timer coalesces: a wait ends on the next multiple of `COALESCE_S` of the loop's
clock, so the probes due within the same window start in one wake-up of the loop, and their
connects and replies come back together, instead of a wake-up or two per probe. A probe starts
at most `COALESCE_S` late; its schedule does not drift (`ProbeState` counts periods from the
due time, not from the wake-up). The figures: bench/README.md, "Probe wake-ups coalesced".

Cancellation-safe: cancelling `run()` while it waits cancels the wait; while it probes, the
executor's own cleanup runs (an exec probe's process group is killed, an HTTP request aborted).
An executor that raises (a bug, not a probe failure) is reported as an attempt that could not
run, logged once per runner, and never kills the loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from nodeagent.agent.probes.results import ProbeOutcome, unknown
from nodeagent.agent.probes.state import Action, ContainerView, ProbeState, Step
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

Executor = Callable[[float], Awaitable[ProbeOutcome]]  # timeoutSeconds -> outcome


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


Timer = Callable[[float, Callable[[], None]], TimerHandle]  # (delay, callback) -> handle, as loop.call_later


COALESCE_S = 0.1  # the grid probe wake-ups are rounded up to (bench/README.md)
EARLY_S = 0.002  # a wake-up this close to the due time probes (a loop whose timers are in ms fires a hair early)


def coalesced(when: float, grid: float) -> float:
    """`when` rounded up to the next multiple of `grid` (itself if already on it; grid 0: as is)."""
    return math.ceil(when / grid) * grid if grid > 0 else when


def coalescing_timer(grid: float) -> Timer:
    """A Timer on the running loop whose deadlines are rounded up to multiples of `grid`."""

    def timer(delay: float, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_at(coalesced(loop.time() + delay, grid), callback)

    return timer


loop_timer: Timer = coalescing_timer(COALESCE_S)


class ProbeRunner:
    def __init__(self, state: ProbeState, execute: Executor, view: Callable[[], ContainerView],
                 on_step: Callable[[ProbeState, Step], None], *, clock: Clock, timer: Timer = loop_timer) -> None:
        self.state = state
        self._execute = execute
        self._view = view
        self._on_step = on_step
        self._clock = clock
        self._timer = timer
        self._waiter: asyncio.Future[None] | None = None
        self._logged_crash = False
        self.attempts = 0

    def trigger(self) -> None:
        """Probe now instead of at the next period (e.g. the container just started)."""
        self.state.trigger(self._clock.now())
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, delay: float) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        handle = self._timer(delay, self._wake)
        try:
            await self._waiter
        finally:
            handle.cancel()
            self._waiter = None

    def _report(self, step: Step) -> None:
        if step.published is not None or step.events or step.kill:
            self._on_step(self.state, step)

    async def _attempt(self) -> ProbeOutcome:
        self.attempts += 1
        try:
            return await self._execute(self.state.timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an executor bug must not stop probing or the agent (logged with its trace)
            if not self._logged_crash:
                self._logged_crash = True
                log.exception("probe_executor_failed", kind=self.state.kind, container=self.state.container)
            return unknown(f"internal error: {e}")

    async def run(self) -> None:
        """Probe until the state says stop (pod terminal, container gone for good) or cancelled."""
        while True:
            delay = self.state.next_due - self._clock.now()
            if delay > 0:
                await self._wait(delay)
                if self.state.next_due - self._clock.now() > EARLY_S:
                    continue  # woken early by nothing due (a trigger for later)
            step = self.state.begin(self._view(), self._clock.now(), self._clock.wall())
            self._report(step)
            if step.action is Action.STOP:
                return
            if step.action is Action.PROBE:
                outcome = await self._attempt()
                self._report(self.state.record(outcome))
