"""The prober's pure state (schedule, thresholds, startup gating, hold, events) and the pod's
readiness conditions, driven by made-up times: nothing sleeps, nothing runs."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.probes.readiness import (
    ContainerFacts,
    container_ready,
    container_started,
    init_container_ready,
    pod_conditions,
)
from nodeagent.agent.probes.results import Result, failure, success, unknown, warning
from nodeagent.agent.probes.state import Action, ContainerView, Event, ProbeState
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, Waiting
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Probe, parse_pod

RUNNING = ContainerView(container_id="c1", running=True, started_at=0.0, started=True)


def probe(**kw: Any) -> Probe:
    return Probe.model_validate({"exec": {"command": ["true"]}, **kw}, by_alias=True)


def state(kind: str = "liveness", start: float = 0.0, restart: bool = True, **kw: Any) -> ProbeState:
    return ProbeState(kind, probe(**kw), "app", start=start, restart_on_failure=restart)  # type: ignore[arg-type]


def test_liveness_failures_reach_threshold_then_kill_and_hold() -> None:
    s = state(periodSeconds=1, failureThreshold=3)
    first = s.begin(RUNNING, 0.0, 100.0)
    assert (first.action, first.published) == (Action.PROBE, Result.SUCCESS)  # liveness starts Success
    steps = [s.record(failure("boom"))]
    for t in (1.0, 2.0):
        assert s.begin(RUNNING, t, 100.0 + t).action is Action.PROBE
        steps.append(s.record(failure("boom")))
    assert [st.kill for st in steps] == [False, False, True]
    assert [st.published for st in steps] == [None, None, Result.FAILURE]
    assert steps[0].events == (Event("Unhealthy", "Liveness probe failed: boom"),)
    assert steps[2].events == (Event("Unhealthy", "Liveness probe failed: boom"),
                               Event("Killing", "Container app failed liveness probe, will be restarted", "Normal"))
    # on hold until a new container: no probe even though the old one still runs
    assert s.begin(RUNNING, 3.0, 103.0).action is Action.WAIT
    restarted = ContainerView(container_id="c2", running=True, started_at=104.0, started=True)
    again = s.begin(restarted, 4.0, 104.0)
    assert (again.action, again.published) == (Action.PROBE, Result.SUCCESS)


def test_a_success_between_failures_restarts_the_count() -> None:
    s = state(failureThreshold=2)
    s.begin(RUNNING, 0.0, 0.0)
    assert not s.record(failure("x")).kill
    s.begin(RUNNING, 10.0, 10.0)
    assert s.record(success()).published is None  # already Success
    s.begin(RUNNING, 20.0, 20.0)
    assert not s.record(failure("x")).kill
    s.begin(RUNNING, 30.0, 30.0)
    assert s.record(failure("x")).kill


def test_kill_carries_probe_grace_and_policy_wording() -> None:
    s = state(failureThreshold=1, terminationGracePeriodSeconds=7, restart=False)
    s.begin(RUNNING, 0.0, 0.0)
    step = s.record(failure("dead"))
    assert step.kill and step.kill_grace_period == 7
    assert step.events[-1] == Event("Killing", "Container app failed liveness probe", "Normal")


def test_startup_failure_kills_too() -> None:
    s = state("startup", failureThreshold=1)
    view = ContainerView("c1", running=True, started_at=0.0, started=False)
    assert s.begin(view, 0.0, 0.0).published is Result.UNKNOWN
    step = s.record(failure("not yet"))
    assert step.kill and step.published is Result.FAILURE
    assert step.events == (Event("Unhealthy", "Startup probe failed: not yet"),
                           Event("Killing", "Container app failed startup probe, will be restarted", "Normal"))


def test_readiness_needs_success_threshold_and_never_kills() -> None:
    s = state("readiness", successThreshold=2, failureThreshold=1)
    assert s.begin(RUNNING, 0.0, 0.0).published is Result.FAILURE  # readiness starts Failure
    assert s.record(success()).published is None
    s.begin(RUNNING, 10.0, 10.0)
    assert s.record(success()).published is Result.SUCCESS
    s.begin(RUNNING, 20.0, 20.0)
    step = s.record(failure("HTTP probe failed with statuscode: 503"))
    assert step.published is Result.FAILURE and not step.kill
    assert step.events == (Event("Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"),)
    s.begin(RUNNING, 30.0, 30.0)
    assert s.begin(RUNNING, 40.0, 40.0).action is Action.PROBE  # no hold for readiness


@pytest.mark.parametrize(("kind", "started", "want"), [
    ("liveness", False, Action.WAIT), ("readiness", False, Action.WAIT), ("startup", False, Action.PROBE),
    ("liveness", True, Action.PROBE), ("readiness", True, Action.PROBE), ("startup", True, Action.WAIT),
])
def test_startup_gates_the_other_probes(kind: str, started: bool, want: Action) -> None:
    view = ContainerView("c1", running=True, started_at=0.0, started=started)
    assert state(kind).begin(view, 0.0, 0.0).action is want


@pytest.mark.parametrize(("delay", "elapsed", "want"), [
    (0, 0.0, Action.PROBE), (5, 4.9, Action.WAIT), (5, 5.0, Action.PROBE), (5, 5.99, Action.PROBE), (10, 9.99, Action.WAIT),
])
def test_initial_delay_counts_whole_seconds_since_start(delay: int, elapsed: float, want: Action) -> None:
    view = ContainerView("c1", running=True, started_at=1000.0, started=True)
    assert state(initialDelaySeconds=delay).begin(view, 0.0, 1000.0 + elapsed).action is want


def test_not_running_publishes_failure_and_stops_only_when_it_will_not_run_again() -> None:
    s = state("readiness", restart=True)
    s.begin(RUNNING, 0.0, 0.0)
    s.record(success())
    dead = ContainerView("c1", running=False, terminated=True)
    step = s.begin(dead, 10.0, 10.0)
    assert (step.action, step.published) == (Action.WAIT, Result.FAILURE)
    never = state("readiness", restart=False)
    never.begin(RUNNING, 0.0, 0.0)
    assert never.begin(dead, 10.0, 10.0).action is Action.STOP
    assert never.begin(RUNNING, 20.0, 20.0).action is Action.STOP  # stopped for good
    waiting = ContainerView("c1", running=False, terminated=False)
    assert state("readiness", restart=False).begin(waiting, 0.0, 0.0).action is Action.WAIT


def test_no_container_yet_waits_without_publishing() -> None:
    step = state().begin(ContainerView(), 0.0, 0.0)
    assert (step.action, step.published) == (Action.WAIT, None)


def test_pod_deletion_quiets_liveness_and_startup_not_readiness() -> None:
    deleting = ContainerView("c1", running=True, started_at=0.0, started=True, deleting=True)
    live = state("liveness")
    live.begin(RUNNING, 0.0, 0.0)
    live.record(failure("x"))
    assert live.begin(deleting, 10.0, 10.0).action is Action.STOP
    assert state("readiness").begin(deleting, 0.0, 0.0).action is Action.PROBE
    terminal = ContainerView("c1", running=False, pod_terminal=True)
    assert state("readiness").begin(terminal, 0.0, 0.0).action is Action.STOP


def test_warning_counts_as_success_and_is_reported() -> None:
    s = state("readiness")
    s.begin(RUNNING, 0.0, 0.0)
    step = s.record(warning("Probe terminated redirects, Response body: moved"))
    assert step.published is Result.SUCCESS
    assert step.events == (Event("ProbeWarning", "Readiness probe warning: Probe terminated redirects, Response body: moved"),)


def test_an_attempt_that_could_not_run_is_reported_not_counted() -> None:
    s = state(failureThreshold=1)
    s.begin(RUNNING, 0.0, 0.0)
    step = s.record(unknown("port http not found"))
    assert not step.kill and step.published is None
    assert step.events == (Event("Unhealthy", "Liveness probe errored and resulted in unknown state: port http not found"),)


def test_schedule_ticks_every_period_takes_a_missed_tick_at_once_and_can_be_triggered() -> None:
    clock = FakeClock(start=50.0)
    s = state(periodSeconds=10, start=clock.now())
    assert s.next_due == 50.0
    s.begin(RUNNING, clock.now(), clock.wall())
    assert s.next_due == 60.0
    clock.advance(25.0)  # a slow probe overran two periods: one tick is taken at once
    s.begin(RUNNING, clock.now(), clock.wall())
    assert s.next_due == clock.now()
    s.begin(RUNNING, clock.now(), clock.wall())
    assert s.next_due == clock.now() + 10.0
    s.trigger(clock.now() + 1.0)
    assert s.next_due == clock.now() + 1.0
    assert (s.period, s.timeout) == (10.0, 1.0)


def test_a_day_of_one_second_probes_against_a_fake_clock() -> None:
    """Drive a liveness probe for a simulated hour: a failure burst of 3 restarts it exactly once."""
    clock = FakeClock(start=0.0)
    s = state(periodSeconds=1, failureThreshold=3, start=clock.now())
    cid, kills, probes = 1, 0, 0
    while clock.now() < 3600:
        if clock.now() >= s.next_due:
            view = ContainerView(f"c{cid}", running=True, started_at=0.0, started=True)
            if s.begin(view, clock.now(), clock.wall()).action is Action.PROBE:
                probes += 1
                bad = 1000 <= clock.now() < 1003
                step = s.record(failure("x") if bad else success())
                if step.kill:
                    kills += 1
                    cid += 1
        clock.advance(0.5)
    assert kills == 1 and cid == 2
    assert 3590 <= probes <= 3600


# ---- readiness of containers and the pod's conditions ----

RUN = ContainerStatus("app", state=Running(0.0))
DONE = ContainerStatus("init", state=Terminated(0, "Completed", 0.0, 1.0))
FAILED = ContainerStatus("init", state=Terminated(1, "Error", 0.0, 1.0))


@pytest.mark.parametrize(("status", "startup", "has", "want"), [
    (RUN, None, False, True), (RUN, Result.UNKNOWN, True, False), (RUN, Result.SUCCESS, True, True),
    (RUN, Result.FAILURE, True, False), (None, None, False, False), (DONE, None, False, False),
])
def test_container_started(status: Any, startup: Any, has: bool, want: bool) -> None:
    assert container_started(status, startup, has) is want


@pytest.mark.parametrize(("status", "started", "readiness", "has", "want"), [
    (RUN, True, None, False, True), (RUN, False, None, False, False), (RUN, True, Result.FAILURE, True, False),
    (RUN, True, Result.SUCCESS, True, True), (DONE, True, None, False, False),
])
def test_container_ready(status: Any, started: bool, readiness: Any, has: bool, want: bool) -> None:
    assert container_ready(status, started, readiness, has) is want


def test_init_container_ready_once_exited_zero() -> None:
    assert init_container_ready(DONE) and not init_container_ready(FAILED) and not init_container_ready(None)


SPEC = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
    "initContainers": [{"name": "init", "command": ["x"]},
                       {"name": "proxy", "command": ["x"], "restartPolicy": "Always"}],
    "containers": [{"name": "a", "command": ["x"]}, {"name": "b", "command": ["x"]}]}}).spec


def facts(**kw: ContainerFacts) -> dict[str, ContainerFacts]:
    return dict(kw)


def cond(conds: list[Any]) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in conds}


def test_conditions_before_anything_runs() -> None:
    got = cond(pod_conditions(SPEC, {}, "Pending", [], 10.0))
    assert got["Initialized"] == (False, "ContainersNotInitialized", "containers with unknown status: [init proxy]")
    assert got["ContainersReady"] == (False, "ContainersNotReady", "containers with unknown status: [proxy a b]")
    assert got["Ready"] == got["ContainersReady"]


def test_conditions_while_initializing_and_when_ready() -> None:
    waiting = ContainerStatus("x", state=Waiting())
    f = facts(init=ContainerFacts(DONE, ready=True), proxy=ContainerFacts(RUN, started=False),
              a=ContainerFacts(waiting), b=ContainerFacts(waiting))
    got = cond(pod_conditions(SPEC, f, "Pending", [], 10.0))
    assert got["Initialized"] == (False, "ContainersNotInitialized", "containers with incomplete status: [proxy]")
    assert got["ContainersReady"] == (False, "ContainersNotReady", "containers with unready status: [proxy a b]")
    f = facts(init=ContainerFacts(DONE, ready=True), proxy=ContainerFacts(RUN, True, True),
              a=ContainerFacts(RUN, True, True), b=ContainerFacts(RUN, True, False))
    got = cond(pod_conditions(SPEC, f, "Running", [], 10.0))
    assert got["Initialized"] == (True, "", "")
    assert got["ContainersReady"] == (False, "ContainersNotReady", "containers with unready status: [b]")
    f["b"] = ContainerFacts(RUN, True, True)
    assert cond(pod_conditions(SPEC, f, "Running", [], 10.0))["Ready"] == (True, "", "")


def test_a_restarting_sidecar_does_not_uninitialize_a_pod_that_ran() -> None:
    f = facts(init=ContainerFacts(DONE, ready=True), proxy=ContainerFacts(ContainerStatus("proxy", Waiting(), DONE.state)),  # type: ignore[arg-type]
              a=ContainerFacts(RUN, True, True), b=ContainerFacts(RUN, True, True))
    got = cond(pod_conditions(SPEC, f, "Running", [], 10.0))
    assert got["Initialized"] == (True, "", "")
    assert got["ContainersReady"] == (False, "ContainersNotReady", "containers with unready status: [proxy]")


def test_succeeded_pod_is_completed() -> None:
    done = {n: ContainerFacts(ContainerStatus(n, state=Terminated(0, "Completed", 0.0, 1.0)), ready=n == "init")
            for n in ("init", "proxy", "a", "b")}
    got = cond(pod_conditions(SPEC, done, "Succeeded", [], 10.0))
    assert got["Initialized"] == (True, "PodCompleted", "")
    assert got["ContainersReady"] == (False, "PodCompleted", "")


def test_last_transition_time_moves_only_when_status_flips() -> None:
    plain = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": {"containers": [{"name": "a", "command": ["x"]}]}}).spec
    not_ready = {"a": ContainerFacts(RUN, True, False)}
    ready = {"a": ContainerFacts(RUN, True, True)}
    c1 = pod_conditions(plain, not_ready, "Running", [], 100.0)
    c2 = pod_conditions(plain, not_ready, "Running", c1, 200.0)
    assert [c.last_transition_time for c in c2] == [100.0, 100.0, 100.0]
    c3 = pod_conditions(plain, ready, "Running", c2, 300.0)
    assert {c.type: c.last_transition_time for c in c3} == {"Initialized": 100.0, "Ready": 300.0, "ContainersReady": 300.0}
    d = c3[1].to_dict()
    assert d == {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "1970-01-01T00:05:00Z"}
