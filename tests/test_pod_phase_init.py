"""Pod phase with init containers and sidecars (upstream's TestPodPhaseWith* tables from
kubelet_pods_test.go, same names), agreement with runtime.state.pod_phase on pods without init
containers, and the init-container sequencing decision."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.lifecycle.init_sequence import InitSteps, next_steps, supervisor_restart_policy, waiting_for
from nodeagent.agent.lifecycle.phase import pod_phase
from nodeagent.agent.runtime import state as rt
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, Waiting
from nodeagent.core.model import parse_pod

T = 1.0


# upstream's status helpers (exit -1 of a failed state is 1 here: exit codes are unsigned bytes)
def waiting(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Waiting()), False


def waiting_last_ok(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Waiting(), last_state=Terminated(0, "Completed", T, T)), False


def waiting_last_failed(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Waiting(), last_state=Terminated(1, "Error", T, T)), False


def running(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Running(T)), False


def started(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Running(T)), True


def stopped(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Terminated(0, "Completed", T, T)), False


succeeded = stopped


def failed(n: str) -> tuple[ContainerStatus, bool]:
    return ContainerStatus(n, Terminated(1, "Error", T, T)), False


def spec(policy: str, init: list[str] | None = None, sidecars: list[str] | None = None,
         order: list[str] | None = None) -> Any:
    inits: dict[str, dict[str, Any]] = {n: {"name": n, "command": ["x"]} for n in init or []}
    inits.update({n: {"name": n, "command": ["x"], "restartPolicy": "Always"} for n in sidecars or []})
    names = order or [*(init or []), *(sidecars or [])]
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "restartPolicy": policy, "initContainers": [inits[n] for n in names],
        "containers": [{"name": "containera", "command": ["x"]}, {"name": "containerb", "command": ["x"]}]}}).spec


def phase(sp: Any, *entries: tuple[ContainerStatus, bool], terminal: bool = False) -> str:
    statuses = {cs.name: cs for cs, _ in entries}
    started_map = {cs.name: s for cs, s in entries}
    return pod_phase(sp, statuses, started_map, pod_is_terminal=terminal)


A, B, X, Y = "containera", "containerb", "containerx", "containery"

CASES: list[tuple[str, Any, tuple[Any, ...], bool, str]] = [
    # TestPodPhaseWithRestartAlways
    ("always: waiting", spec("Always"), (), False, "Pending"),
    ("always: all running", spec("Always"), (running(A), running(B)), False, "Running"),
    ("always: all stopped", spec("Always"), (stopped(A), stopped(B)), False, "Running"),
    ("always: all succeeded, terminal", spec("Always"), (succeeded(A), succeeded(B)), True, "Succeeded"),
    ("always: stopped, terminal", spec("Always"), (succeeded(A), failed(B)), True, "Failed"),
    ("always: mixed #1", spec("Always"), (running(A), stopped(B)), False, "Running"),
    ("always: mixed #2", spec("Always"), (running(A),), False, "Pending"),
    ("always: mixed #3", spec("Always"), (running(A), waiting(B)), False, "Pending"),
    ("always: backoff crashloop", spec("Always"), (running(A), waiting_last_ok(B)), False, "Running"),
    # TestPodPhaseWithRestartAlwaysInitContainers
    ("always init: empty", spec("Always", [X]), (), False, "Pending"),
    ("always init: running", spec("Always", [X]), (running(X),), False, "Pending"),
    ("always init: terminated non-zero", spec("Always", [X]), (failed(X),), False, "Pending"),
    ("always init: waiting, terminated zero", spec("Always", [X]), (waiting_last_ok(X),), False, "Pending"),
    ("always init: waiting, terminated non-zero", spec("Always", [X]), (waiting_last_failed(X),), False, "Pending"),
    ("always init: waiting, not terminated", spec("Always", [X]), (waiting(X),), False, "Pending"),
    ("always init: succeeded", spec("Always", [X]), (succeeded(X), running(A), running(B)), False, "Running"),
    # TestPodPhaseWithRestartAlwaysRestartableInitContainers
    ("always sidecar: empty", spec("Always", sidecars=[X]), (), False, "Pending"),
    ("always sidecar: running", spec("Always", sidecars=[X]), (running(X),), False, "Pending"),
    ("always sidecar: stopped", spec("Always", sidecars=[X]), (stopped(X),), False, "Pending"),
    ("always sidecar: waiting, terminated zero", spec("Always", sidecars=[X]), (waiting_last_ok(X),), False, "Pending"),
    ("always sidecar: waiting, terminated non-zero", spec("Always", sidecars=[X]), (waiting_last_failed(X),), False, "Pending"),
    ("always sidecar: waiting, not terminated", spec("Always", sidecars=[X]), (waiting(X),), False, "Pending"),
    ("always sidecar: started, 1/2 regular running", spec("Always", sidecars=[X]), (started(X), running(A)), False, "Pending"),
    ("always sidecar: started, all running", spec("Always", sidecars=[X]), (started(X), running(A), running(B)), False, "Running"),
    ("always sidecar: running, all running", spec("Always", sidecars=[X]), (running(X), running(A), running(B)), False, "Running"),
    ("always sidecar: stopped, all running", spec("Always", sidecars=[X]), (stopped(X), running(A), running(B)), False, "Running"),
    ("always sidecar: backoff, all running", spec("Always", sidecars=[X]), (waiting_last_ok(X), running(A), running(B)), False, "Running"),
    ("always sidecar: failed, regular succeeded, terminal", spec("Always", sidecars=[X]), (failed(X), succeeded(A), succeeded(B)), True, "Succeeded"),
    ("always sidecar: succeeded, regular succeeded, terminal", spec("Always", sidecars=[X]), (succeeded(X), succeeded(A), succeeded(B)), True, "Succeeded"),
    # TestPodPhaseWithRestartAlwaysAndPodHasRun (X regular init, Y sidecar, one app container A)
    ("has run: init, sidecar and regular running", "hasrun", (running(X), running(Y), running(A)), False, "Pending"),
    ("has run: regular stopped, init and sidecar running", "hasrun", (running(X), running(Y), stopped(A)), False, "Pending"),
    ("has run: init succeeded, sidecar running, regular stopped", "hasrun", (succeeded(X), running(Y), stopped(A)), False, "Running"),
    ("has run: init succeeded, sidecar and regular running", "hasrun", (succeeded(X), running(Y), running(A)), False, "Running"),
    # TestPodPhaseWithRestartNever
    ("never: waiting", spec("Never"), (), False, "Pending"),
    ("never: all running", spec("Never"), (running(A), running(B)), False, "Running"),
    ("never: all succeeded", spec("Never"), (succeeded(A), succeeded(B)), False, "Succeeded"),
    ("never: all failed", spec("Never"), (failed(A), failed(B)), False, "Failed"),
    ("never: mixed #1", spec("Never"), (running(A), succeeded(B)), False, "Running"),
    ("never: mixed #2", spec("Never"), (running(A),), False, "Pending"),
    ("never: mixed #3", spec("Never"), (running(A), waiting(B)), False, "Pending"),
    # TestPodPhaseWithRestartNeverInitContainers
    ("never init: empty", spec("Never", [X]), (), False, "Pending"),
    ("never init: running", spec("Never", [X]), (running(X),), False, "Pending"),
    ("never init: terminated non-zero", spec("Never", [X]), (failed(X),), False, "Failed"),
    ("never init: waiting, terminated zero", spec("Never", [X]), (waiting_last_ok(X),), False, "Pending"),
    ("never init: waiting, terminated non-zero", spec("Never", [X]), (waiting_last_failed(X),), False, "Failed"),
    ("never init: waiting, not terminated", spec("Never", [X]), (waiting(X),), False, "Pending"),
    ("never init: succeeded", spec("Never", [X]), (succeeded(X), running(A), running(B)), False, "Running"),
    # TestPodPhaseWithRestartNeverRestartableInitContainers
    ("never sidecar: empty", spec("Never", sidecars=[X]), (), False, "Pending"),
    ("never sidecar: running", spec("Never", sidecars=[X]), (running(X),), False, "Pending"),
    ("never sidecar: stopped", spec("Never", sidecars=[X]), (stopped(X),), False, "Pending"),
    ("never sidecar: waiting, terminated zero", spec("Never", sidecars=[X]), (waiting_last_ok(X),), False, "Pending"),
    ("never sidecar: waiting, terminated non-zero", spec("Never", sidecars=[X]), (waiting_last_failed(X),), False, "Pending"),
    ("never sidecar: waiting, not terminated", spec("Never", sidecars=[X]), (waiting(X),), False, "Pending"),
    ("never sidecar: started, one main running", spec("Never", sidecars=[X]), (started(X), running(A)), False, "Pending"),
    ("never sidecar: started, main succeeded", spec("Never", sidecars=[X]), (started(X), succeeded(A), succeeded(B)), False, "Running"),
    ("never sidecar: running, main succeeded", spec("Never", sidecars=[X]), (running(X), succeeded(A), succeeded(B)), False, "Running"),
    ("never sidecar: all succeeded", spec("Never", sidecars=[X]), (succeeded(X), succeeded(A), succeeded(B)), False, "Succeeded"),
    ("never sidecar: non-zero, main succeeded", spec("Never", sidecars=[X]), (failed(X), succeeded(A), succeeded(B)), False, "Succeeded"),
    ("never sidecar: backoff, main succeeded", spec("Never", sidecars=[X]), (waiting_last_ok(X), succeeded(A), succeeded(B)), False, "Succeeded"),
    ("never sidecar: backoff non-zero, main succeeded", spec("Never", sidecars=[X]), (waiting_last_failed(X), succeeded(A), succeeded(B)), False, "Succeeded"),
    # TestPodPhaseWithRestartOnFailure
    ("onfailure: waiting", spec("OnFailure"), (), False, "Pending"),
    ("onfailure: all running", spec("OnFailure"), (running(A), running(B)), False, "Running"),
    ("onfailure: all succeeded", spec("OnFailure"), (succeeded(A), succeeded(B)), False, "Succeeded"),
    ("onfailure: all failed", spec("OnFailure"), (failed(A), failed(B)), False, "Running"),
    ("onfailure: mixed #1", spec("OnFailure"), (running(A), succeeded(B)), False, "Running"),
    ("onfailure: mixed #2", spec("OnFailure"), (running(A),), False, "Pending"),
    ("onfailure: mixed #3", spec("OnFailure"), (running(A), waiting(B)), False, "Pending"),
    ("onfailure: backoff crashloop", spec("OnFailure"), (running(A), waiting_last_failed(B)), False, "Running"),
    # TestPodPhaseWithRestartOnFailureInitContainers
    ("onfailure init: terminated non-zero", spec("OnFailure", [X]), (failed(X),), False, "Pending"),
    ("onfailure init: waiting, terminated non-zero", spec("OnFailure", [X]), (waiting_last_failed(X),), False, "Pending"),
    ("onfailure init: succeeded", spec("OnFailure", [X]), (succeeded(X), running(A), running(B)), False, "Running"),
]


def _spec_of(s: Any) -> Any:
    if s == "hasrun":
        return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": X, "command": ["x"]}, {"name": Y, "command": ["x"], "restartPolicy": "Always"}],
            "containers": [{"name": A, "command": ["x"]}]}}).spec
    return s


@pytest.mark.parametrize(("sp", "entries", "terminal", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_phase_upstream_tables(sp: Any, entries: tuple[Any, ...], terminal: bool, want: str) -> None:
    assert phase(_spec_of(sp), *entries, terminal=terminal) == want


@pytest.mark.parametrize("policy", ["Always", "OnFailure", "Never"])
@pytest.mark.parametrize("terminal", [False, True])
def test_agrees_with_the_runtime_phase_without_init_containers(policy: str, terminal: bool) -> None:
    makers = [None, waiting, waiting_last_ok, waiting_last_failed, running, succeeded, failed]
    sp = spec(policy)
    for ma in makers:
        for mb in makers:
            entries = tuple(m(n) for m, n in ((ma, A), (mb, B)) if m is not None)
            statuses = {cs.name: cs for cs, _ in entries}
            want = rt.pod_phase(policy, [A, B], statuses, pod_is_terminal=terminal)
            assert phase(sp, *entries, terminal=terminal) == want, (ma, mb)


# ---- sequencing ----

SEQ = spec("Always", order=["setup", "proxy", "migrate"], init=["setup", "migrate"], sidecars=["proxy"])


def steps(sp: Any, *entries: tuple[ContainerStatus, bool]) -> InitSteps:
    return next_steps(sp, {cs.name: cs for cs, _ in entries}, {cs.name: s for cs, s in entries})


SEQ_CASES: list[tuple[str, tuple[Any, ...], InitSteps]] = [
    ("nothing yet: first init container", (), InitSteps(start=("setup",))),
    ("first init running: wait", (running("setup"),), InitSteps()),
    ("first init failed, OnFailure: its supervisor restarts it, wait", (failed("setup"),), InitSteps()),
    ("first init crash-looping: wait", (waiting_last_failed("setup"),), InitSteps()),
    ("first done: the sidecar", (succeeded("setup"),), InitSteps(start=("proxy",))),
    ("sidecar running, not started: wait", (succeeded("setup"), running("proxy")), InitSteps()),
    ("sidecar started: next init", (succeeded("setup"), started("proxy")), InitSteps(start=("migrate",))),
    ("sidecar restarting before init done: wait", (succeeded("setup"), waiting_last_failed("proxy")), InitSteps()),
    ("all init done: app containers together",
     (succeeded("setup"), started("proxy"), succeeded("migrate")), InitSteps(start=(A, B), initialized=True)),
    ("one app started: the other",
     (succeeded("setup"), started("proxy"), succeeded("migrate"), running(A)), InitSteps(start=(B,), initialized=True)),
    ("app ran, sidecar restarting: still initialized, nothing to start",
     (succeeded("setup"), waiting_last_failed("proxy"), succeeded("migrate"), running(A), running(B)), InitSteps(initialized=True)),
]


@pytest.mark.parametrize(("entries", "want"), [c[1:] for c in SEQ_CASES], ids=[c[0] for c in SEQ_CASES])
def test_next_steps(entries: tuple[Any, ...], want: InitSteps) -> None:
    assert steps(SEQ, *entries) == want


def test_failed_init_container_fails_a_never_pod() -> None:
    sp = spec("Never", init=[X, Y])
    assert steps(sp, failed(X)) == InitSteps(failed=X)
    assert steps(sp, waiting_last_failed(X)) == InitSteps()  # not final yet


def test_sidecars_stop_in_reverse_once_the_app_containers_are_done() -> None:
    sp = spec("Never", sidecars=["log", "proxy"], order=["log", "proxy"])
    done = (started("log"), started("proxy"), succeeded(A), failed(B))
    assert steps(sp, *done) == InitSteps(stop=("proxy", "log"), initialized=True)
    # under Always the app containers restart: the sidecars stay
    always = spec("Always", sidecars=["log"])
    assert steps(always, started("log"), succeeded(A), succeeded(B)).stop == ()
    # OnFailure: a failed app container will run again
    on_failure = spec("OnFailure", sidecars=["log"])
    assert steps(on_failure, started("log"), succeeded(A), failed(B)).stop == ()
    assert steps(on_failure, started("log"), succeeded(A), succeeded(B)).stop == ("log",)


def test_pod_without_init_containers_starts_everything() -> None:
    assert steps(spec("Always")) == InitSteps(start=(A, B), initialized=True)


@pytest.mark.parametrize(("pod_policy", "sidecar", "init", "want"), [
    ("Always", False, True, "OnFailure"), ("OnFailure", False, True, "OnFailure"), ("Never", False, True, "Never"),
    ("Never", True, True, "Always"), ("Always", False, False, "Always"), ("Never", False, False, "Never"),
])
def test_supervisor_restart_policy(pod_policy: str, sidecar: bool, init: bool, want: str) -> None:
    c = spec(pod_policy, sidecars=[X] if sidecar else None, init=None if sidecar else [X]).init_containers[0]
    assert supervisor_restart_policy(pod_policy, c, init=init) == want


def test_waiting_for_names_the_init_container_holding_the_pod() -> None:
    assert waiting_for(SEQ, {}, {}) == "setup"
    st = {"setup": succeeded("setup")[0], "proxy": running("proxy")[0]}
    assert waiting_for(SEQ, st, {"proxy": False}) == "proxy"
    assert waiting_for(SEQ, st, {"proxy": True}) == "migrate"
    st["migrate"] = succeeded("migrate")[0]
    assert waiting_for(SEQ, st, {"proxy": True}) is None
