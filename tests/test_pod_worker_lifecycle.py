"""The pod worker runs what the plan says around the processes: init containers in order, sidecars,
probes, hooks, termination messages, the downward-API env (PodManager with real short processes
and the in-memory cgroup tree of tests/fakes.py, so exec probes and hooks run on the host).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeCgroupDriver

from nodeagent.agent.events import EventRecorder
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.journal import CheckpointJournal
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.worker import PodEnv, PodWorker
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.core.clock import SystemClock
from nodeagent.core.downward import NodeFacts
from nodeagent.core.quantity import parse_quantity

GI = 1 << 30
FACTS = NodeFacts(node_name="node-a", host_ips=("10.0.0.5",), pod_ips=("10.0.0.5",),
                  allocatable={"cpu": parse_quantity("2"), "memory": parse_quantity("4Gi")})


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["/bin/sh", "-c", script], **extra}


def manifest(name: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                         "labels": {"app": "web"}, "annotations": {"team": "blue"}},
            "spec": {"containers": containers, "initContainers": init or [], **spec}}


def exec_probe(script: str, **timing: Any) -> dict[str, Any]:
    return {"exec": {"command": ["/bin/sh", "-c", script]}, "periodSeconds": 1, "timeoutSeconds": 5, **timing}


def make_manager(state_dir: Path, driver: FakeCgroupDriver, events: EventRecorder | None = None) -> PodManager:
    env = PodEnv(driver=driver, state_dir=str(state_dir), memory_capacity=4 * GI, clock=SystemClock(),
                 backoff_factory=lambda: CrashBackoff(initial=0.05, maximum=0.2), events=events,
                 node_facts=lambda: FACTS)
    allocatable = {"cpu": parse_quantity("2"), "memory": parse_quantity("1Gi"), "pods": parse_quantity("10")}
    m = PodManager(env, CheckpointStore.open(state_dir), allocatable=allocatable, enforced_allocatable=None,
                   max_pods=10)
    m.setup_cgroups()
    return m


@pytest.fixture
def driver() -> FakeCgroupDriver:
    return FakeCgroupDriver()


@pytest.fixture
def events() -> EventRecorder:
    return EventRecorder(SystemClock(), "node-a")


@pytest.fixture
async def manager(tmp_path: Path, driver: FakeCgroupDriver, events: EventRecorder):  # type: ignore[no-untyped-def]
    m = make_manager(tmp_path / "state", driver, events)
    yield m
    await stop_all(m)


async def stop_all(m: PodManager) -> None:
    for w in list(m.pods.values()):
        if not w.terminal:
            m.terminate(w, 0, remove=True)
    await m.wait_stopping()
    await m.flush()


async def until(fn: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        await asyncio.sleep(0.02)


def pod(m: PodManager, name: str) -> dict[str, Any]:
    p = m.get_pod("default", name)
    assert p is not None
    return p


def cstatus(m: PodManager, name: str, container: str) -> dict[str, Any]:
    st = pod(m, name)["status"]
    for cs in [*st.get("initContainerStatuses", []), *st["containerStatuses"]]:
        if cs["name"] == container:
            return dict(cs)
    raise AssertionError(f"no status for {container}")


def conditions(m: PodManager, name: str) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod(m, name)["status"].get("conditions", [])}


def event_list(events: EventRecorder, reason: str | None = None) -> list[tuple[str, str, str]]:
    return [(e["reason"], e["involvedObject"].get("fieldPath", ""), e["message"]) for e in events.list()
            if reason is None or e["reason"] == reason]


# ---- init containers ----


async def test_init_containers_run_in_order_then_the_app_containers(manager: PodManager, tmp_path: Path) -> None:
    order = tmp_path / "order"
    m = manifest("init", [sh("app", f"echo app >> {order}; exec sleep 30")],
                 init=[sh("one", f"sleep 0.2; echo one >> {order}"), sh("two", f"echo two >> {order}")])
    created = await manager.create_pod(m)
    st = created["status"]
    assert st["phase"] == "Pending"
    assert [cs["name"] for cs in st["initContainerStatuses"]] == ["one", "two"]
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert conditions(manager, "init")["Initialized"] == "False"
    await until(lambda: order.exists() and order.read_text() == "one\ntwo\napp\n", what="app running")
    st = pod(manager, "init")["status"]
    assert [cs["state"]["terminated"]["reason"] for cs in st["initContainerStatuses"]] == ["Completed", "Completed"]
    assert [cs["ready"] for cs in st["initContainerStatuses"]] == [True, True]
    # the app's shell can write its line before the worker has recorded it running (a loaded machine)
    await until(lambda: pod(manager, "init")["status"]["phase"] == "Running", what="phase Running")
    await until(lambda: conditions(manager, "init") == {"Initialized": "True", "Ready": "True",
                                                         "ContainersReady": "True"}, what="ready")


async def test_a_failing_init_container_fails_a_never_pod_and_is_retried_otherwise(manager: PodManager,
                                                                                  tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    await manager.create_pod(manifest("never", [sh("app", "exec sleep 30")],
                                      init=[sh("setup", f"echo x >> {runs}; exit 3")], restartPolicy="Never"))
    await until(lambda: pod(manager, "never")["status"]["phase"] == "Failed", what="the pod to fail")
    assert "app" not in manager.pods[("default", "never")].workers
    assert runs.read_text() == "x\n"
    # the phase is reported before the worker's teardown ends (a loaded machine sees the gap)
    await until(lambda: manager.pods[("default", "never")].finished, what="the worker to finish")

    flag = tmp_path / "second-time"
    await manager.create_pod(manifest("retry", [sh("app", "exec sleep 30")], restartPolicy="Always",
                                      init=[sh("setup", f"test -e {flag} || {{ touch {flag}; exit 1; }}")]))
    await until(lambda: cstatus(manager, "retry", "app")["state"].get("running"), what="app after a retry")
    assert cstatus(manager, "retry", "setup")["restartCount"] == 1


async def test_a_sidecar_keeps_running_beside_the_app_and_stops_once_the_app_is_done(manager: PodManager,
                                                                                      tmp_path: Path) -> None:
    up = tmp_path / "proxy-up"
    m = manifest("side", [sh("app", f"test -e {up} && echo served > {tmp_path}/out")],
                 init=[sh("proxy", f"sleep 0.3; touch {up}; exec sleep 30", restartPolicy="Always",
                          startupProbe=exec_probe(f"test -e {up}", failureThreshold=30))],
                 restartPolicy="Never")
    await manager.create_pod(m)
    await until(lambda: pod(manager, "side")["status"]["phase"] == "Succeeded", what="the pod to complete")
    assert (tmp_path / "out").read_text() == "served\n"
    assert "terminated" in cstatus(manager, "side", "proxy")["state"]  # stopped after the app was done


# ---- probes ----


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
async def test_a_liveness_failure_restarts_the_container_with_events(manager: PodManager, events: EventRecorder,
                                                                     tmp_path: Path, policy: str) -> None:
    """Under OnFailure too, although the killed container exits 0 (kubelet: shouldRestartOnFailure)."""
    bad = tmp_path / "unhealthy"
    m = manifest("live", [sh("app", "trap 'exit 0' TERM; while :; do sleep 0.05; done",
                             livenessProbe=exec_probe(f"test ! -e {bad} || {{ rm {bad}; exit 1; }}",
                                                      failureThreshold=1))], restartPolicy=policy)
    await manager.create_pod(m)
    await until(lambda: cstatus(manager, "live", "app")["state"].get("running"), what="running")
    bad.touch()
    await until(lambda: cstatus(manager, "live", "app")["restartCount"] == 1, what="a restart")
    assert [e for e in event_list(events) if e[0] != "Started"][:2] == [
        ("Unhealthy", "spec.containers{app}", "Liveness probe failed: "),
        ("Killing", "spec.containers{app}", "Container app failed liveness probe, will be restarted")]
    await until(lambda: len(event_list(events, "Started")) == 2, what="a Started event per run")
    assert event_list(events, "Started")[0] == ("Started", "spec.containers{app}", "Started container app")
    assert cstatus(manager, "live", "app")["lastState"]["terminated"]["exitCode"] == 0  # its TERM trap


async def test_a_liveness_failure_under_never_kills_without_a_restart(manager: PodManager, tmp_path: Path) -> None:
    armed = tmp_path / "armed"  # the probe fails only once the TERM trap is set (it may run first)
    m = manifest("once", [sh("app", f"trap 'exit 3' TERM; touch {armed}; while :; do sleep 0.05; done",
                             livenessProbe=exec_probe(f"test ! -e {armed}", failureThreshold=1))],
                 restartPolicy="Never")
    await manager.create_pod(m)
    await until(lambda: cstatus(manager, "once", "app")["state"].get("terminated"), what="the kill")
    assert cstatus(manager, "once", "app")["restartCount"] == 0
    assert cstatus(manager, "once", "app")["state"]["terminated"]["exitCode"] == 3
    await until(lambda: pod(manager, "once")["status"]["phase"] == "Failed", what="Failed")


async def test_readiness_sets_ready_and_the_pod_conditions_both_ways(manager: PodManager, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    await manager.create_pod(manifest("ready", [sh("app", "exec sleep 30",
                                                   readinessProbe=exec_probe(f"test -e {ready}"))]))
    await until(lambda: cstatus(manager, "ready", "app")["state"].get("running"), what="running")
    assert cstatus(manager, "ready", "app")["ready"] is False
    assert conditions(manager, "ready")["Ready"] == "False"
    ready.touch()
    await until(lambda: conditions(manager, "ready")["Ready"] == "True", what="ready")
    assert cstatus(manager, "ready", "app")["ready"] is True
    assert conditions(manager, "ready")["ContainersReady"] == "True"
    ready.unlink()
    await until(lambda: conditions(manager, "ready")["Ready"] == "False", what="not ready again")
    assert cstatus(manager, "ready", "app")["ready"] is False


async def test_a_startup_probe_holds_liveness_and_readiness_back(manager: PodManager, tmp_path: Path) -> None:
    started, probed = tmp_path / "started", tmp_path / "probed"
    await manager.create_pod(manifest("slow", [sh(
        "app", "exec sleep 30", startupProbe=exec_probe(f"test -e {started}", failureThreshold=60),
        readinessProbe=exec_probe(f"touch {probed}"), livenessProbe=exec_probe("exit 1"))]))
    await until(lambda: cstatus(manager, "slow", "app")["state"].get("running"), what="running")
    await asyncio.sleep(1.5)
    assert not probed.exists() and cstatus(manager, "slow", "app")["started"] is False
    assert cstatus(manager, "slow", "app")["restartCount"] == 0  # the failing liveness probe waits too
    started.touch()
    await until(lambda: cstatus(manager, "slow", "app")["started"], what="started")
    await until(lambda: probed.exists() and cstatus(manager, "slow", "app")["ready"], what="readiness probed")


# ---- hooks and termination messages ----


async def test_pre_stop_runs_before_the_sigterm_and_post_start_after_the_start(manager: PodManager,
                                                                              tmp_path: Path) -> None:
    log = tmp_path / "log"
    script = f"trap 'echo term >> {log}; exit 0' TERM; echo main >> {log}; while :; do sleep 0.05; done"
    await manager.create_pod(manifest("hooks", [sh("app", script, lifecycle={
        "postStart": {"exec": {"command": ["/bin/sh", "-c", f"echo post-start >> {log}"]}},
        "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep 0.3; echo pre-stop >> {log}"]}}})],
        terminationGracePeriodSeconds=10))
    await until(lambda: log.exists() and "post-start" in log.read_text(), what="the postStart hook")
    await manager.delete_pod("default", "hooks", None)
    await manager.wait_stopping()
    lines = log.read_text().split()
    assert lines[-2:] == ["pre-stop", "term"] and "post-start" in lines


async def test_a_failing_post_start_hook_kills_the_container(manager: PodManager, events: EventRecorder) -> None:
    await manager.create_pod(manifest("post", [sh("app", "exec sleep 30", lifecycle={
        "postStart": {"exec": {"command": ["/bin/sh", "-c", "echo nope; exit 3"]}}})], restartPolicy="Never"))
    await until(lambda: pod(manager, "post")["status"]["phase"] == "Failed", what="killed")
    (_, where, message), killing = event_list(events, "FailedPostStartHook")[0], event_list(events, "Killing")
    assert where == "spec.containers{app}" and "exited with 3" in message and 'message: "nope\\n"' in message
    assert killing == [("Killing", "spec.containers{app}", "FailedPostStartHook")]


async def test_termination_messages_are_reported_and_checkpointed(manager: PodManager, tmp_path: Path) -> None:
    msg = tmp_path / "msg"
    await manager.create_pod(manifest("msg", [
        sh("file", f"echo 'bad config' > {msg}; exit 3", terminationMessagePath=str(msg)),
        sh("logs", "echo starting; echo 'panic: boom' >&2; exit 2", terminationMessagePath=str(tmp_path / "none"),
           terminationMessagePolicy="FallbackToLogsOnError")], restartPolicy="Never"))
    await until(lambda: pod(manager, "msg")["status"]["phase"] == "Failed", what="both done")
    assert cstatus(manager, "msg", "file")["state"]["terminated"]["message"] == "bad config\n"
    assert cstatus(manager, "msg", "logs")["state"]["terminated"]["message"] == "starting\npanic: boom\n"
    await manager.flush()
    record = CheckpointJournal(CheckpointStore.open(tmp_path / "state")).read()[("default", "msg")]
    saved = record.container("file")
    assert saved is not None and saved.last_state["current"]["terminated"]["message"] == "bad config\n"


async def test_the_termination_message_of_a_restarted_container_is_in_its_last_state(manager: PodManager,
                                                                                      tmp_path: Path) -> None:
    msg = tmp_path / "msg"
    await manager.create_pod(manifest("again", [sh("app", f"echo 'run failed' > {msg}; exit 1",
                                                   terminationMessagePath=str(msg))], restartPolicy="OnFailure"))
    await until(lambda: cstatus(manager, "again", "app")["restartCount"] >= 1, what="a restart")
    assert cstatus(manager, "again", "app")["lastState"]["terminated"]["message"] == "run failed\n"


# ---- env, config errors ----


async def test_the_resolved_env_reaches_the_process(manager: PodManager) -> None:
    await manager.create_pod(manifest("env", [sh("app", "echo $POD@$NODE@$IP@$MEM", env=[
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Gi"}}}])],
        restartPolicy="Never"))
    await until(lambda: pod(manager, "env")["status"]["phase"] == "Succeeded", what="done")
    assert manager.read_log("default", "env", "app", None) == "env@node-a@10.0.0.5@4\n"
    assert pod(manager, "env")["status"]["podIP"] == "10.0.0.5"


async def test_a_container_that_cannot_be_configured_waits_with_the_reason(manager: PodManager,
                                                                           events: EventRecorder) -> None:
    await manager.create_pod(manifest("cfg", [sh("app", "exec sleep 30",
                                                 env=[{"name": "X", "valueFrom": {"configMapKeyRef": {
                                                     "name": "settings", "key": "x"}}}])]))
    await until(lambda: event_list(events, "Failed"), what="the event")
    assert cstatus(manager, "cfg", "app")["state"] == {"waiting": {"reason": "CreateContainerConfigError",
                                                                  "message": 'configmap "settings" not found'}}
    assert pod(manager, "cfg")["status"]["phase"] == "Pending"
    assert event_list(events, "Failed") == [("Failed", "spec.containers{app}",
                                             'Error: configmap "settings" not found')]


# ---- agent restart ----


async def test_a_restarted_agent_does_not_run_completed_init_containers_again(tmp_path: Path,
                                                                             driver: FakeCgroupDriver) -> None:
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    state = tmp_path / "state"
    first = make_manager(state, driver)
    await first.create_pod(manifest("mid", [sh("app", f"echo app >> {runs}; exec sleep 30")],
                                    init=[sh("one", f"echo one >> {runs}"),
                                          sh("two", f"echo two >> {runs}; while ! test -e {gate}; do sleep 0.05; done")]))
    await until(lambda: runs.exists() and runs.read_text() == "one\ntwo\n", what="the second init container")
    await first.detach_all()  # agent shutdown mid-init: "two" keeps running
    second = make_manager(state, driver)
    try:
        assert await second.restore() == []
        worker: PodWorker = second.pods[("default", "mid")]
        assert "app" not in worker.workers and worker.workers["two"].pid is not None  # adopted, not restarted
        gate.touch()
        await until(lambda: runs.read_text() == "one\ntwo\napp\n", what="the app after init")
        # its first line can come before the agent has taken its start in (ContainerCreating until then)
        await until(lambda: cstatus(second, "mid", "app")["state"].get("running"), what="the app to be running")
        assert cstatus(second, "mid", "one")["restartCount"] == 0
    finally:
        await stop_all(second)


async def test_probes_start_again_for_adopted_containers(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    ready = tmp_path / "ready"
    ready.touch()
    state = tmp_path / "state"
    first = make_manager(state, driver)
    await first.create_pod(manifest("adopt", [sh("app", "exec sleep 30", readinessProbe=exec_probe(f"test -e {ready}"))]))
    await until(lambda: conditions(first, "adopt").get("Ready") == "True", what="ready")
    await first.detach_all()
    second = make_manager(state, driver)
    try:
        await second.restore()
        await until(lambda: conditions(second, "adopt").get("Ready") == "True", what="ready after the restart")
        ready.unlink()
        await until(lambda: conditions(second, "adopt").get("Ready") == "False", what="probed again")
    finally:
        await stop_all(second)
