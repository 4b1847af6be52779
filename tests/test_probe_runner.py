"""The probe runner and PodProbes on a fake clock: the loop waits by the injected sleep (which
moves the clock), so schedules, triggers, kills and cancellation are checked without sleeping.
The executors here are scripted; the real ones are exercised in integration/test_probes.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from nodeagent.agent.probes.http_probe import HttpProber
from nodeagent.agent.probes.pod_probes import PodProbes, ProbeContext, exec_command, make_executor
from nodeagent.agent.probes.results import ProbeOutcome, Result, failure, success
from nodeagent.agent.probes.runner import COALESCE_S, EARLY_S, ProbeRunner, coalesced, coalescing_timer, loop_timer
from nodeagent.agent.probes.state import Action, ContainerView, Event, ProbeState, Step
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Probe, parse_pod


class FakeTimer:
    """A loop.call_later on a FakeClock: `run_until` fires due callbacks in time order, moving the
    clock, and lets the loop run between them; nothing waits for real time."""

    class Entry:
        def __init__(self, due: float, callback: Callable[[], None]) -> None:
            self.due, self.callback, self.cancelled = due, callback, False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.pending: list[FakeTimer.Entry] = []
        self.delays: list[float] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> FakeTimer.Entry:
        self.delays.append(delay)
        entry = FakeTimer.Entry(self.clock.now() + delay, callback)
        self.pending.append(entry)
        return entry

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    async def run_until(self, end: float) -> None:
        while True:
            await self.settle()
            live = [e for e in self.pending if not e.cancelled]
            self.pending = live
            if not live:
                return
            entry = min(live, key=lambda e: e.due)
            if entry.due > end:
                return
            self.pending.remove(entry)
            self.clock.advance(max(0.0, entry.due - self.clock.now()))
            entry.callback()


def probe(**kw: Any) -> Probe:
    return Probe.model_validate({"exec": {"command": ["true"]}, **kw}, by_alias=True)


async def run_for(runner: ProbeRunner, timer: FakeTimer, end: float) -> None:
    task = asyncio.ensure_future(runner.run())
    await timer.run_until(end)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_runner_probes_every_period_and_reports_the_kill() -> None:
    clock = FakeClock(start=0.0)
    timer = FakeTimer(clock)
    outcomes = iter([success()] * 10 + [failure("down")] * 3 + [success()] * 100)
    steps: list[Step] = []
    state = ProbeState("liveness", probe(periodSeconds=2, failureThreshold=3), "app", start=clock.now())

    async def execute(timeout_seconds: float) -> ProbeOutcome:
        assert timeout_seconds == 1.0
        return next(outcomes)

    view = ContainerView("c1", running=True, started_at=clock.wall(), started=True)
    runner = ProbeRunner(state, execute, lambda: view, lambda s, st: steps.append(st), clock=clock, timer=timer)
    await run_for(runner, timer, 60.0)
    assert runner.attempts == 13  # then on hold: the container never restarted
    assert clock.now() == 60.0
    kills = [s for s in steps if s.kill]
    assert len(kills) == 1
    assert [e.reason for e in kills[0].events] == ["Unhealthy", "Killing"]
    assert set(timer.delays) == {2.0} and len(timer.delays) == 31  # a wait after each tick at 0, 2, ... 60


async def test_runner_stops_when_the_state_says_so_and_survives_a_crashing_executor() -> None:
    clock = FakeClock(start=0.0)
    timer = FakeTimer(clock)
    views = iter([ContainerView("c1", running=True, started_at=clock.wall(), started=True)] * 3
                 + [ContainerView("c1", running=False, terminated=True)] * 10)
    steps: list[Step] = []

    async def execute(timeout_seconds: float) -> ProbeOutcome:
        raise RuntimeError("bug")

    state = ProbeState("readiness", probe(periodSeconds=1), "app", start=clock.now(), restart_on_failure=False)
    runner = ProbeRunner(state, execute, lambda: next(views), lambda s, st: steps.append(st), clock=clock, timer=timer)
    task = asyncio.ensure_future(runner.run())
    await timer.run_until(100.0)
    assert task.done() and task.exception() is None  # returned on its own: terminated under Never
    assert runner.attempts == 3
    assert steps[0].published is Result.FAILURE
    assert all("internal error: bug" in e.message for s in steps for e in s.events)


@pytest.mark.parametrize(("when", "grid", "expected"), [
    (10.0, 0.25, 10.0),  # on the grid: as is
    (10.01, 0.25, 10.25),  # rounded up, never down: a probe may start late, never early
    (10.24, 0.25, 10.25),
    (10.26, 0.25, 10.5),
    (7.3, 0.0, 7.3),  # grid 0: no coalescing
])
def test_coalesced_rounds_up_to_the_grid(when: float, grid: float, expected: float) -> None:
    assert coalesced(when, grid) == expected


async def test_the_loop_timer_puts_waits_due_in_one_window_on_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    now = loop.time()
    monkeypatch.setattr(loop, "time", lambda: now)  # the timers are armed at one instant of the loop's clock
    window_end = coalesced(now + 0.001, COALESCE_S)
    delays = [0.001, (window_end - now) / 2, window_end - now - 1e-9]  # all due within the same window
    handles = [loop_timer(d, lambda: fired.append(loop.time())) for d in delays]
    assert all(isinstance(h, asyncio.TimerHandle) for h in handles)
    assert {h.when() for h in handles if isinstance(h, asyncio.TimerHandle)} == {window_end}
    later = coalescing_timer(COALESCE_S)(window_end - now + COALESCE_S / 2, lambda: None)
    assert isinstance(later, asyncio.TimerHandle)
    assert later.when() == pytest.approx(window_end + COALESCE_S)  # the next window
    for h in [*handles, later]:
        h.cancel()


class EarlyTimer(FakeTimer):
    """A timer whose callbacks fire 1 ms before the deadline, as a loop keeping time in whole ms may."""

    def __call__(self, delay: float, callback: Callable[[], None]) -> FakeTimer.Entry:
        return super().__call__(delay - EARLY_S / 2 if delay > EARLY_S else delay, callback)


async def test_a_wake_up_a_hair_early_probes_and_keeps_the_schedule() -> None:
    clock = FakeClock(start=0.0)
    timer = EarlyTimer(clock)
    state = ProbeState("readiness", probe(periodSeconds=1), "app", start=clock.now())

    async def execute(timeout_seconds: float) -> ProbeOutcome:
        return success()

    view = ContainerView("c1", running=True, started_at=clock.wall(), started=True)
    runner = ProbeRunner(state, execute, lambda: view, lambda s, st: None, clock=clock, timer=timer)
    await run_for(runner, timer, 9.5)
    assert runner.attempts == 10  # at 0, ~1, ... ~9: one per period, not a second wait per early wake-up
    assert len(timer.delays) == 10 and state.next_due == 10.0  # the schedule counts from due times


async def test_trigger_cuts_the_wait_short() -> None:
    clock = FakeClock(start=0.0)
    probed = asyncio.Event()
    state = ProbeState("readiness", probe(periodSeconds=3600), "app", start=clock.now())

    async def execute(timeout_seconds: float) -> ProbeOutcome:
        probed.set()
        return success()

    timer = FakeTimer(clock)  # never advanced: only a trigger can end the hour's wait
    view = ContainerView("c1", running=True, started_at=clock.wall(), started=True)
    runner = ProbeRunner(state, execute, lambda: view, lambda s, st: None, clock=clock, timer=timer)
    task = asyncio.ensure_future(runner.run())
    await asyncio.wait_for(probed.wait(), 5)  # the first tick is immediate
    probed.clear()
    await timer.settle()
    assert not probed.is_set() and timer.delays == [3600.0]
    runner.trigger()
    await asyncio.wait_for(probed.wait(), 5)
    assert runner.attempts == 2
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_cancelling_mid_probe_cancels_the_executor() -> None:
    clock = FakeClock(start=0.0)
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def execute(timeout_seconds: float) -> ProbeOutcome:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return success()

    view = ContainerView("c1", running=True, started_at=clock.wall(), started=True)
    state = ProbeState("liveness", probe(), "app", start=clock.now())
    task = asyncio.ensure_future(ProbeRunner(state, execute, lambda: view, lambda s, st: None, clock=clock).run())
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert cancelled.is_set() and task.cancelled()


POD = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "uid": "u1"}, "spec": {
    "initContainers": [{"name": "proxy", "command": ["x"], "restartPolicy": "Always",
                        "readinessProbe": {"tcpSocket": {"port": 1}}}],
    "containers": [{"name": "app", "command": ["x"], "env": [{"name": "WHO", "value": "me"}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "startupProbe": {"exec": {"command": ["check", "$(WHO)"]}, "failureThreshold": 2},
                    "livenessProbe": {"httpGet": {"port": "http"}, "failureThreshold": 1,
                                      "terminationGracePeriodSeconds": 3}},
                   {"name": "plain", "command": ["x"]}]}})


async def test_pod_probes_gate_on_startup_and_kill_on_liveness() -> None:
    clock = FakeClock(start=0.0)
    statuses: dict[str, ContainerStatus] = {
        "app": ContainerStatus("app", Running(clock.wall()), container_id="id-1"),
        "proxy": ContainerStatus("proxy", Running(clock.wall()), container_id="id-p"),
        "plain": ContainerStatus("plain", Running(clock.wall()), container_id="id-q"),
    }
    events: list[tuple[str, Event]] = []
    kills: list[tuple[str, str, int | None]] = []
    changes: list[int] = []
    pp = PodProbes(POD, ProbeContext(HttpProber(), exec_target=lambda name: None), status=statuses.get,
                   deleting=lambda: False, on_event=lambda c, e: events.append((c, e)),
                   on_kill=lambda c, m, g: kills.append((c, m, g)), on_change=lambda: changes.append(1), clock=clock)
    assert set(pp.runners) == {("app", "startup"), ("app", "liveness"), ("proxy", "readiness")}
    assert not pp.started("app") and pp.started("plain") and pp.ready("plain") and not pp.ready("proxy")
    # drive the states by hand, as the runners would
    startup = pp.runners[("app", "startup")]
    view = startup._view()
    assert view.container_id == "id-1" and view.running and not view.started
    assert pp.runners[("app", "liveness")].state.begin(view, clock.now(), clock.wall()).action is Action.WAIT
    assert startup.state.begin(view, clock.now(), clock.wall()).action is Action.PROBE
    pp._step(startup.state, startup.state.record(success()))
    assert pp.started("app") and pp.ready("app")  # no readiness probe: ready once started
    live = pp.runners[("app", "liveness")]
    assert live.state.next_due == clock.now()  # triggered by the startup success
    view = live._view()
    assert view.started and live.state.begin(view, clock.now(), clock.wall()).action is Action.PROBE
    pp._step(live.state, live.state.record(failure("HTTP probe failed with statuscode: 500")))
    assert kills == [("app", "Container app failed liveness probe, will be restarted", 3)]
    assert events[-2] == ("app", Event("Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500"))
    conds = {c.type: c.status for c in pp.conditions("Running", [], clock.wall())}
    assert conds == {"Initialized": True, "Ready": False, "ContainersReady": False}  # proxy not ready
    statuses["app"] = ContainerStatus("app", Terminated(137, "Error", 0.0, 1.0), container_id="id-1")
    assert not pp.ready("app")


async def test_pod_probes_start_and_stop_their_tasks() -> None:
    clock = FakeClock(start=0.0)
    spawned: list[str] = []

    def spawn(coro: Any, name: str) -> asyncio.Task[None]:
        spawned.append(name)
        return asyncio.ensure_future(coro)

    pp = PodProbes(POD, ProbeContext(HttpProber(), exec_target=lambda name: None), status=lambda n: None,
                   deleting=lambda: False, on_event=lambda c, e: None, on_kill=lambda c, m, g: None,
                   on_change=lambda: None, clock=clock)
    pp.start(spawn)
    assert sorted(spawned) == ["probe default/web/app liveness", "probe default/web/app startup",
                               "probe default/web/proxy readiness"]
    await asyncio.sleep(0)
    await pp.stop()


def test_exec_command_expands_literal_env_only() -> None:
    c = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "command": ["x"], "env": [{"name": "A", "value": "1"},
                                                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}
    ).spec.containers[0]
    assert exec_command(["$(A)", "$(B)", "$$(A)"], c) == ["1", "$(B)", "$(A)"]


@pytest.mark.parametrize(("port", "message"), [("nope", "port nope not found"), (0, "invalid port number: 0")])
async def test_a_port_that_cannot_be_resolved_is_an_attempt_that_could_not_run(port: Any, message: str) -> None:
    c = POD.spec.containers[0]
    valid = Probe.model_validate({"tcpSocket": {"port": 1}}, by_alias=True)
    assert valid.tcp_socket is not None
    p = valid.model_copy(update={"tcp_socket": valid.tcp_socket.model_copy(update={"port": port})})
    execute: Callable[[float], Any] = make_executor(p, c, ProbeContext(HttpProber(), exec_target=lambda n: None))
    outcome = await execute(1.0)
    assert outcome.verdict.value == "unknown" and outcome.output == message


def test_the_grpc_client_is_imported_by_the_first_grpc_probe_only() -> None:
    """h2, hpack and hyperframe (~1 MiB resident after import) stay out of an agent without gRPC
    probes; making a gRPC probe's executor brings them in."""
    code = ("import sys, nodeagent.cli.main, nodeagent.agent.daemon\n"
            "from nodeagent.agent.probes.http_probe import HttpProber\n"
            "from nodeagent.agent.probes.pod_probes import ProbeContext, make_executor\n"
            "from nodeagent.core.model import Probe, parse_pod\n"
            "def h2(): return sorted(m for m in sys.modules if m.split('.')[0] in ('h2', 'hpack', 'hyperframe'))\n"
            "print(h2())\n"
            "c = parse_pod({'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'p'},"
            " 'spec': {'containers': [{'name': 'c', 'command': ['x']}]}}).spec.containers[0]\n"
            "make_executor(Probe.model_validate({'grpc': {'port': 1}}, by_alias=True), c,"
            " ProbeContext(HttpProber(), exec_target=lambda n: None))\n"
            "print(len(h2()) > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"], out


def test_adopted_pods_spread_their_first_probes_over_a_period() -> None:
    import random

    clock = FakeClock(start=100.0)
    pp = PodProbes(POD, ProbeContext(HttpProber(), exec_target=lambda name: None), status=lambda n: None,
                   deleting=lambda: False, on_event=lambda c, e: None, on_kill=lambda c, m, g: None,
                   on_change=lambda: None, clock=clock, spread=random.Random(7))
    dues = [r.state.next_due for r in pp.runners.values()]
    assert all(100.0 <= d < 110.0 for d in dues) and len(set(dues)) == len(dues)
    fresh = PodProbes(POD, ProbeContext(HttpProber(), exec_target=lambda name: None), status=lambda n: None,
                      deleting=lambda: False, on_event=lambda c, e: None, on_kill=lambda c, m, g: None,
                      on_change=lambda: None, clock=clock)
    assert {r.state.next_due for r in fresh.runners.values()} == {100.0}  # a new pod is probed at once
