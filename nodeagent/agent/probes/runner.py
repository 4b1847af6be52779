"""The loop of one probe: wait for the schedule, run the executor, feed the state, report.

One asyncio task per probe (the kubelet runs one goroutine per probe worker). The runner holds
no policy: `ProbeState` decides, the executor does the I/O, `on_step` receives every step that
published a result or has events (the owner turns them into container readiness, events and a
kill). Time comes from the injected clock and the waiting from the injected sleep, so a test
can drive it without sleeping.

Cancellation-safe: cancelling `run()` while it waits cancels the wait; while it probes, the
executor's own cleanup runs (an exec probe's process group is killed, an HTTP request aborted).
An executor that raises (a bug, not a probe failure) is reported as an attempt that could not
run, logged once per runner, and never kills the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from nodeagent.agent.probes.results import ProbeOutcome, unknown
from nodeagent.agent.probes.state import Action, ContainerView, ProbeState, Step
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)

Executor = Callable[[float], Awaitable[ProbeOutcome]]  # timeoutSeconds -> outcome
Sleep = Callable[[float], Awaitable[None]]


class ProbeRunner:
    def __init__(self, state: ProbeState, execute: Executor, view: Callable[[], ContainerView],
                 on_step: Callable[[ProbeState, Step], None], *, clock: Clock, sleep: Sleep = asyncio.sleep) -> None:
        self.state = state
        self._execute = execute
        self._view = view
        self._on_step = on_step
        self._clock = clock
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._logged_crash = False
        self.attempts = 0

    def trigger(self) -> None:
        """Probe now instead of at the next period (e.g. the container just started)."""
        self.state.trigger(self._clock.now())
        self._wake.set()

    async def _wait(self, delay: float) -> None:
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sleeper, waker):
                t.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)
            self._wake.clear()

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
                if self.state.next_due > self._clock.now():
                    continue  # woken early by nothing due (a trigger for later)
            step = self.state.begin(self._view(), self._clock.now(), self._clock.wall())
            self._report(step)
            if step.action is Action.STOP:
                return
            if step.action is Action.PROBE:
                outcome = await self._attempt()
                self._report(self.state.record(outcome))
