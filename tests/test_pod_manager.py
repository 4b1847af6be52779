"""PodManager with real short processes and an in-memory cgroup tree (tests/fakes.py).

Admission, the cgroups asked for, restart policies, deletion with a grace period, checkpoints,
re-adoption by a second manager (what an agent restart does), orphan cgroup removal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeCgroupDriver

from nodeagent.agent.api.backend import AdmissionError, AlreadyExists
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.pods.checkpoint import CheckpointStore, PodCheckpoint
from nodeagent.agent.pods.journal import CheckpointJournal
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.core.clock import SystemClock
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import milli_cpu_to_shares

GI = 1 << 30
MI = 1 << 20
SLEEP = "exec sleep 30"


def manifest(name: str, script: str = SLEEP, *, restart: str = "Always", uid: str | None = None,
             requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
             grace: int | None = None, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "containers": containers or [{"name": "main", "command": ["/bin/sh", "-c", script], "resources": resources}],
        "restartPolicy": restart,
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid or str(uuid.uuid4())}, "spec": spec}


def make_manager(state_dir: Path, driver: FakeCgroupDriver, *, max_pods: int = 10) -> PodManager:
    env = PodEnv(driver=driver, state_dir=str(state_dir), memory_capacity=4 * GI, clock=SystemClock(),
                 backoff_factory=lambda: CrashBackoff(initial=0.05, maximum=0.2))
    allocatable = {"cpu": parse_quantity("2"), "memory": parse_quantity("1Gi"), "pods": parse_quantity(str(max_pods))}
    manager = PodManager(env, CheckpointStore.open(state_dir), allocatable=allocatable,
                         enforced_allocatable={"cpu": parse_quantity("2"), "memory": parse_quantity("2Gi")},
                         max_pods=max_pods)
    manager.setup_cgroups()
    return manager


def durable(state_dir: Path, name: str, namespace: str = "default") -> PodCheckpoint | None:
    """The pod's record as a restarted agent would load it now (per-pod file + journal)."""
    return CheckpointJournal(CheckpointStore.open(state_dir)).read().get((namespace, name))


@pytest.fixture
def driver() -> FakeCgroupDriver:
    return FakeCgroupDriver()


@pytest.fixture
async def manager(tmp_path: Path, driver: FakeCgroupDriver):  # type: ignore[no-untyped-def]
    m = make_manager(tmp_path, driver)
    yield m
    await stop_all(m)


async def stop_all(m: PodManager) -> None:
    """Kill whatever a test left running (only processes it started)."""
    for w in list(m.pods.values()):
        if not w.terminal:
            m.terminate(w, 0, remove=True)
    await m.wait_stopping()
    await m.flush()


async def until(fn: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    return data[data.rindex(b")") + 2:].split()[0] != b"Z"


def status(m: PodManager, name: str, container: str = "main") -> dict[str, Any]:
    pod = m.get_pod("default", name)
    assert pod is not None, name
    return next(cs for cs in pod["status"]["containerStatuses"] if cs["name"] == container)


def pid_of(m: PodManager, name: str, container: str = "main") -> int | None:
    return m.pods[("default", name)].workers[container].pid


# ---- cgroups ----


def test_setup_creates_kubepods_with_enforced_allocatable_and_qos_tiers(manager: PodManager,
                                                                         driver: FakeCgroupDriver) -> None:
    assert driver.specs["kubepods"].memory_max == 2 * GI
    assert driver.specs["kubepods"].cpu_shares == 2048
    assert driver.specs["kubepods/burstable"].cpu_shares == 2
    assert driver.specs["kubepods/besteffort"].cpu_shares == 2


async def test_create_runs_the_command_in_cgroups_with_its_limits(manager: PodManager,
                                                                    driver: FakeCgroupDriver) -> None:
    uid = str(uuid.uuid4())
    out = await manager.create_pod(manifest("web", uid=uid, limits={"cpu": "250m", "memory": "64Mi"}))
    assert out["status"]["qosClass"] == "Guaranteed"
    pod_spec = driver.specs[f"kubepods/pod{uid}"]
    assert (pod_spec.cpu_shares, pod_spec.cpu_quota_us, pod_spec.memory_max) == (256, 25000, 64 * MI)
    c_spec = driver.specs[f"kubepods/pod{uid}/main"]
    assert (c_spec.cpu_shares, c_spec.cpu_quota_us, c_spec.memory_max) == (256, 25000, 64 * MI)
    pid = await until(lambda: status(manager, "web").get("containerID") and pid_of(manager, "web"),
                      what="a pid, running")  # the containerID once the shim is in its cgroup
    assert alive(pid)
    cs = status(manager, "web")
    assert "running" in cs["state"] and cs["containerID"].startswith(f"nodeagent://{pid}@")
    assert manager.get_pod("default", "web")["status"]["phase"] == "Running"  # type: ignore[index]


async def test_burstable_tier_weighs_the_sum_of_its_pods_requests(manager: PodManager,
                                                                   driver: FakeCgroupDriver) -> None:
    await manager.create_pod(manifest("a", requests={"cpu": "100m"}))
    await manager.create_pod(manifest("b", requests={"cpu": "200m"}))
    await manager.create_pod(manifest("c"))  # BestEffort: not counted
    assert driver.specs["kubepods/burstable"].cpu_shares == milli_cpu_to_shares(300)
    await manager.delete_pod("default", "b", 0)
    await manager.wait_stopping()
    assert driver.specs["kubepods/burstable"].cpu_shares == milli_cpu_to_shares(100)
    assert driver.specs["kubepods/besteffort"].cpu_shares == 2


# ---- admission ----


async def test_admission_refuses_what_does_not_fit_and_starts_nothing(manager: PodManager,
                                                                       driver: FakeCgroupDriver) -> None:
    await manager.create_pod(manifest("a", requests={"cpu": "1500m", "memory": "512Mi"}))
    before = dict(driver.specs)
    uid = str(uuid.uuid4())
    with pytest.raises(AdmissionError) as e:
        await manager.create_pod(manifest("b", uid=uid, requests={"cpu": "600m"}))
    assert e.value.reason == "OutOfcpu"
    with pytest.raises(AdmissionError) as e:
        await manager.create_pod(manifest("c", requests={"memory": "600Mi"}))
    assert e.value.reason == "OutOfmemory"
    with pytest.raises(AlreadyExists):
        await manager.create_pod(manifest("a"))
    assert [p["metadata"]["name"] for p in manager.list_pods()] == ["a"]
    assert driver.specs == before  # not one cgroup made for a refused pod
    assert not list((Path(manager.env.state_dir) / "pods").glob("*_b_*"))


async def test_max_pods(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    m = make_manager(tmp_path, driver, max_pods=2)
    try:
        await m.create_pod(manifest("a"))
        await m.create_pod(manifest("b"))
        with pytest.raises(AdmissionError) as e:
            await m.create_pod(manifest("c"))
        assert e.value.reason == "OutOfpods"
    finally:
        await stop_all(m)


async def test_finished_pods_give_their_requests_back(manager: PodManager) -> None:
    await manager.create_pod(manifest("job", "exit 0", restart="Never", requests={"cpu": "1500m"}))
    with pytest.raises(AdmissionError):
        await manager.create_pod(manifest("next", requests={"cpu": "1"}))
    await until(lambda: manager.get_pod("default", "job")["status"]["phase"] == "Succeeded",  # type: ignore[index]
                what="the job to succeed")
    await manager.create_pod(manifest("next", requests={"cpu": "1"}))


async def test_cgroup_setup_failure_is_refused_cleanly(manager: PodManager, driver: FakeCgroupDriver) -> None:
    uid = str(uuid.uuid4())
    driver.fail_create.add(f"kubepods/besteffort/pod{uid}/main")
    with pytest.raises(AdmissionError) as e:
        await manager.create_pod(manifest("broken", uid=uid))
    assert e.value.reason == "CreatePodSandboxError"
    assert manager.get_pod("default", "broken") is None
    assert not [p for p in driver.specs if uid in p]
    assert f"kubepods/besteffort/pod{uid}" in driver.killed


# ---- restart policies ----


async def test_restart_policies(manager: PodManager) -> None:
    await manager.create_pod(manifest("never", "exit 3", restart="Never"))
    await manager.create_pod(manifest("done", "exit 0", restart="OnFailure"))
    await manager.create_pod(manifest("flaky", "exit 1", restart="OnFailure"))
    phase = lambda n: manager.get_pod("default", n)["status"]["phase"]  # type: ignore[index]
    await until(lambda: phase("never") == "Failed", what="never to fail")
    assert status(manager, "never")["state"]["terminated"]["exitCode"] == 3
    assert status(manager, "never")["restartCount"] == 0
    await until(lambda: phase("done") == "Succeeded", what="done to succeed")
    await until(lambda: status(manager, "flaky")["restartCount"] >= 2, what="flaky to be restarted")
    assert status(manager, "flaky")["lastState"]["terminated"]["exitCode"] == 1
    assert status(manager, "never")["restartCount"] == 0
    # admission's cheap filter agrees with the phase, with and without exits behind a pod
    await manager.create_pod(manifest("up", "sleep 30"))
    await until(lambda: phase("up") == "Running", what="up to run")
    holds = {name: w.holds_resources for (_, name), w in manager.pods.items()}
    assert holds == {"never": False, "done": False, "flaky": True, "up": True}
    assert {p.pod.metadata.name for p in manager.active_plans()} == {"flaky", "up"}


# ---- deletion ----


async def test_delete_terms_then_kills_after_grace_and_forgets_the_pod(tmp_path: Path, manager: PodManager,
                                                                        driver: FakeCgroupDriver) -> None:
    uid = str(uuid.uuid4())
    ready = tmp_path / "ready"
    await manager.create_pod(manifest("stubborn", f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done",
                                      uid=uid))
    pid = await until(lambda: pid_of(manager, "stubborn"), what="a pid")
    await until(ready.exists, what="the trap")
    await until(lambda: durable(tmp_path, "stubborn"), what="a checkpoint")
    t0 = time.monotonic()
    out = await manager.delete_pod("default", "stubborn", 1)
    assert out is not None and "deletionTimestamp" in out["metadata"]
    await until(lambda: not alive(pid), 5, "the kill after the grace period")
    assert time.monotonic() - t0 >= 0.9, "killed before its grace period"
    await until(lambda: manager.get_pod("default", "stubborn") is None, what="the pod to be removed")
    await manager.flush()
    assert durable(tmp_path, "stubborn") is None
    assert f"kubepods/besteffort/pod{uid}" in driver.removed
    assert not [p for p in driver.specs if uid in p]
    assert await manager.delete_pod("default", "stubborn", 0) is None


async def test_read_log(manager: PodManager) -> None:
    await manager.create_pod(manifest("hello", "echo hello; echo world", restart="Never"))
    two = [{"name": n, "command": ["/bin/sh", "-c", "echo " + n]} for n in ("x", "y")]
    await manager.create_pod(manifest("two", restart="Never", containers=two))
    await until(lambda: manager.read_log("default", "hello", None, None) == "hello\nworld\n", what="the log")
    assert manager.read_log("default", "hello", None, 1) == "world\n"
    await until(lambda: manager.read_log("default", "two", "y", None) == "y\n", what="y's log")
    with pytest.raises(FieldError):
        manager.read_log("default", "two", None, None)
    assert manager.read_log("default", "two", "z", None) is None
    assert manager.read_log("default", "nope", None, None) is None


# ---- checkpoints and re-adoption ----


async def test_second_manager_adopts_running_pods_and_restarts_the_dead(tmp_path: Path,
                                                                         driver: FakeCgroupDriver) -> None:
    first = make_manager(tmp_path, driver)
    for name, policy in (("keep", "Always"), ("died", "Always"), ("never", "Never")):
        await first.create_pod(manifest(name, restart=policy))
    pids = {n: await until(lambda n=n: status(first, n).get("containerID") and pid_of(first, n), what=f"{n} running")
            for n in ("keep", "died", "never")}
    ids = {n: status(first, n)["containerID"] for n in pids}
    await first.detach_all()  # agent shutdown: checkpoint, let go, leave them running
    assert all(alive(p) for p in pids.values())
    for n in ("died", "never"):  # die while no agent watches (reaped: we are still their parent)
        os.kill(pids[n], signal.SIGKILL)
        os.waitpid(pids[n], 0)

    second = make_manager(tmp_path, driver)
    try:
        assert await second.restore() == []
        assert status(second, "keep")["containerID"] == ids["keep"]
        assert pid_of(second, "keep") == pids["keep"] and status(second, "keep")["restartCount"] == 0
        await until(lambda: status(second, "died")["restartCount"] == 1 and status(second, "died").get("containerID"),
                    what="died to be restarted and running")  # its containerID once the shim is in its cgroup
        cs = status(second, "died")
        assert cs["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
        assert cs["containerID"] != ids["died"]
        await until(lambda: second.get_pod("default", "never")["status"]["phase"] == "Failed",  # type: ignore[index]
                    what="never to fail")
        assert status(second, "never")["restartCount"] == 0
        # the adopted process is under the new manager's control
        await second.delete_pod("default", "keep", 5)
        await second.wait_stopping()
        assert not alive(pids["keep"])
    finally:
        await stop_all(second)


async def test_shutdown_does_not_wait_for_a_pod_being_stopped(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    """An agent stopping mid-grace lets go at once (a CI run saw a shutdown wait out a grace
    period); the deletion is in the record, so the next agent carries the termination on."""
    marker = tmp_path / "termed"  # the first SIGTERM is noted and ignored, the second ends it
    script = f"trap 'if [ -e {marker} ]; then exit 0; fi; touch {marker}' TERM; while :; do sleep 0.05; done"
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("slow", script, grace=60))
    pid = await until(lambda: pid_of(first, "slow"), what="slow to run")
    try:
        await first.delete_pod("default", "slow", None)
        await until(marker.exists, what="the first SIGTERM")
        began = time.monotonic()
        await first.detach_all()
        assert time.monotonic() - began < 5, "the shutdown waited for the grace period"
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "stop:default/slow"], "its stop still runs"
        assert alive(pid)
        second = make_manager(tmp_path, driver)
        try:
            await second.restore()
            await until(lambda: second.get_pod("default", "slow") is None, what="the restored termination")
            assert not alive(pid)
        finally:
            await stop_all(second)
    finally:
        if alive(pid):  # a failure above must not leave the SIGTERM-ignoring shell behind
            os.kill(pid, signal.SIGKILL)


async def test_completed_containers_are_not_run_again_after_restore(tmp_path: Path,
                                                                     driver: FakeCgroupDriver) -> None:
    marker = tmp_path / "runs"
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("job", f"echo run >> {marker}", restart="OnFailure"))
    await until(lambda: first.get_pod("default", "job")["status"]["phase"] == "Succeeded",  # type: ignore[index]
                what="the job to finish")
    await first.detach_all()
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        worker = second.pods[("default", "job")]
        await until(lambda: worker.finished, what="the restored job's worker to finish")
        assert second.get_pod("default", "job")["status"]["phase"] == "Succeeded"  # type: ignore[index]
        assert status(second, "job")["restartCount"] == 0
        assert marker.read_text() == "run\n"
    finally:
        await stop_all(second)


async def test_restore_removes_orphan_pod_cgroups_only(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    first = make_manager(tmp_path, driver)
    known = str(uuid.uuid4())
    await first.create_pod(manifest("known", uid=known))
    await first.detach_all()
    orphan = str(uuid.uuid4())
    driver.create(f"kubepods/burstable/pod{orphan}/main", CgroupSpec())
    driver.create("kubepods/besteffort/not-a-pod", CgroupSpec())
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        assert f"kubepods/burstable/pod{orphan}" in driver.killed
        assert not driver.exists(f"kubepods/burstable/pod{orphan}")
        assert driver.exists(f"kubepods/besteffort/pod{known}/main")
        assert driver.exists("kubepods/besteffort/not-a-pod")
        assert f"kubepods/besteffort/pod{known}" not in driver.killed
    finally:
        await stop_all(second)


async def test_corrupt_checkpoint_is_reported_and_the_rest_restored(tmp_path: Path,
                                                                     driver: FakeCgroupDriver) -> None:
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("good"))
    await first.detach_all()
    (tmp_path / "checkpoints" / "default_bad.json").write_text("{not json")
    second = make_manager(tmp_path, driver)
    try:
        problems = await second.restore()
        assert len(problems) == 1 and "default_bad.json" in problems[0]
        assert [p["metadata"]["name"] for p in second.list_pods()] == ["good"]
    finally:
        await stop_all(second)


# ---- durability (journal.py): what a 2xx promised survives a restart ----


class ProcsDriver(FakeCgroupDriver):
    """The fake tree, plus processes the test says are in a cgroup (what a restart finds there)."""

    def __init__(self) -> None:
        super().__init__()
        self.procs: dict[str, list[int]] = {}

    def pids(self, path: str) -> list[int]:
        return list(self.procs.get(self._key(path), []))


async def crash(m: PodManager) -> None:
    """What SIGKILL leaves: the processes run on, nothing more is written (pending writes finish)."""
    await m._stopping.close()
    await m._tasks.close()
    await asyncio.gather(*(w.detach() for w in m.pods.values()))
    if m._saver is not None:
        m._saver.cancel()
    await m.journal.close()


async def test_create_is_durable_before_it_returns_and_before_its_first_process(tmp_path: Path,
                                                                                driver: FakeCgroupDriver) -> None:
    m = make_manager(tmp_path, driver)
    started_at_sync: list[list[bool]] = []
    m.journal._sync = lambda fd: (started_at_sync.append([w.started for w in m.pods.values()]), os.fdatasync(fd))[1]
    try:
        await m.create_pod(manifest("one"))
        assert durable(tmp_path, "one") is not None
        assert started_at_sync[0] == [False], "the record was fsynced before anything started"
    finally:
        await stop_all(m)


async def test_concurrent_creates_share_a_group_commit(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    m = make_manager(tmp_path, driver, max_pods=30)

    def slow(fd: int) -> None:
        time.sleep(0.05)
        os.fdatasync(fd)

    m.journal._sync = slow
    try:
        await asyncio.gather(*(m.create_pod(manifest(f"p{i}")) for i in range(20)))
        creates = m.journal.stats.sizes[:3]
        assert m.journal.stats.batches < 20 and max(creates) >= 10, m.journal.stats.sizes
        assert all(durable(tmp_path, f"p{i}") for i in range(20))
    finally:
        await stop_all(m)


async def test_a_create_that_cannot_be_recorded_is_refused_and_leaves_nothing(tmp_path: Path,
                                                                            driver: FakeCgroupDriver) -> None:
    from nodeagent.agent.pods.errors import DurabilityError

    m = make_manager(tmp_path, driver)

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    m.journal._sync = full
    uid = str(uuid.uuid4())
    with pytest.raises(DurabilityError, match="No space left on device"):
        await m.create_pod(manifest("nospace", uid=uid))
    assert m.get_pod("default", "nospace") is None
    assert not [p for p in driver.specs if uid in p], "no cgroup made"
    assert durable(tmp_path, "nospace") is None
    m.journal._sync = os.fdatasync
    await m.create_pod(manifest("nospace", uid=uid))  # the name and resources were given back
    await stop_all(m)


async def test_a_recorded_delete_is_carried_on_by_the_next_agent(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    ready = tmp_path / "ready"
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("stubborn", f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done"))
    pid = await until(lambda: pid_of(first, "stubborn"), what="a pid")
    await until(ready.exists, what="the trap")
    t0 = time.monotonic()
    await first.delete_pod("default", "stubborn", 2)
    rec = durable(tmp_path, "stubborn")
    assert rec is not None and rec.deletion is not None and rec.deletion.grace_period == 2.0
    await crash(first)  # the agent dies during the grace period
    assert alive(pid)
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        assert second.get_pod("default", "stubborn")["metadata"]["deletionTimestamp"]  # type: ignore[index]
        await until(lambda: not alive(pid), 6, "the kill at the recorded deadline")
        assert time.monotonic() - t0 >= 1.9, "the grace period was not cut short"
        await until(lambda: second.get_pod("default", "stubborn") is None, what="the pod to be removed")
        await second.flush()
        assert durable(tmp_path, "stubborn") is None
    finally:
        await stop_all(second)
    try:
        os.waitpid(pid, 0)  # still our child in this test process
    except ChildProcessError:
        pass


async def test_a_deleted_pod_never_starts_again(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    """The container had exited (Always) when the agent died right after the delete's 200."""
    runs = tmp_path / "runs"
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("gone", f"echo run >> {runs}; exec sleep 30"))
    pid = await until(lambda: pid_of(first, "gone"), what="a pid")
    await first.delete_pod("default", "gone", 30)
    await crash(first)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        await until(lambda: second.get_pod("default", "gone") is None, what="the pod to be removed")
        await asyncio.sleep(0.2)
        assert runs.read_text() == "run\n"
    finally:
        await stop_all(second)


async def test_a_process_spawned_before_its_pid_was_recorded_is_adopted_not_started_again(tmp_path: Path) -> None:
    driver = ProcsDriver()
    runs = tmp_path / "runs"
    first = make_manager(tmp_path, driver)
    await first.create_pod(manifest("once", f"echo run >> {runs}; exec sleep 30"))
    pid = await until(lambda: pid_of(first, "once"), what="a pid")
    await first.flush()
    await crash(first)
    # the journal as it was between the spawn and the pid's record: the create's record alone
    rec = durable(tmp_path, "once")
    assert rec is not None
    store = CheckpointStore.open(tmp_path)
    journal = CheckpointJournal(store)
    journal.load_all()
    from dataclasses import replace as dc_replace
    await journal.put(dc_replace(rec, containers=()))
    await journal.close()
    worker_path = f"{rec.manifest['metadata']['uid']}"
    path = next(p for p in driver.specs if worker_path in p and p.endswith("/main"))
    driver.procs[path] = [pid]
    second = make_manager(tmp_path, driver)
    try:
        await second.restore()
        assert pid_of(second, "once") == pid
        await asyncio.sleep(0.2)
        assert runs.read_text() == "run\n"
        assert status(second, "once")["state"].get("running")
    finally:
        await stop_all(second)


async def test_crash_backoff_and_restart_count_survive_a_restart(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    env = PodEnv(driver=driver, state_dir=str(tmp_path), memory_capacity=4 * GI, clock=SystemClock(),
                 backoff_factory=lambda: CrashBackoff(initial=20, maximum=300))

    def slow_manager() -> PodManager:
        m = make_manager(tmp_path, driver)
        m.env = env
        return m

    first = slow_manager()
    await first.create_pod(manifest("loop", "exit 1"))
    await until(lambda: status(first, "loop")["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff",
                what="the back-off")
    assert status(first, "loop")["restartCount"] == 1
    await first.detach_all()
    second = slow_manager()
    try:
        await second.restore()
        await asyncio.sleep(0.3)  # a reset back-off would restart it at once
        cs = status(second, "loop")
        assert cs["restartCount"] == 1 and cs["state"]["waiting"]["reason"] == "CrashLoopBackOff", cs
        assert second.pods[("default", "loop")].workers["main"].backoff.current() == 20
    finally:
        await stop_all(second)


async def test_the_cgroup_of_a_recorded_pod_that_cannot_be_planned_is_kept(tmp_path: Path,
                                                                           driver: FakeCgroupDriver) -> None:
    first = make_manager(tmp_path, driver)
    uid = str(uuid.uuid4())
    await first.create_pod(manifest("odd", uid=uid))
    pid = await until(lambda: pid_of(first, "odd"), what="a pid")
    await first.detach_all()
    second = make_manager(tmp_path, driver)
    second.env = PodEnv(driver=driver, state_dir=str(tmp_path), memory_capacity=4 * GI, clock=SystemClock(),
                        clamp_oom_score_adj=lambda adj: (_ for _ in ()).throw(ValueError("cannot plan")))
    try:
        problems = await second.restore()
        assert any("cannot plan" in p for p in problems)
        assert f"kubepods/besteffort/pod{uid}" not in driver.killed
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("restart", ["Always", "Never"])
async def test_an_eviction_is_shown_only_once_it_is_on_disk(tmp_path: Path, driver: FakeCgroupDriver,
                                                           restart: str) -> None:
    """The kill does not wait for the record, but Failed/Evicted is reported only once the record
    holding the eviction is durable: a crash in between must not take back what was reported.
    Meanwhile the pod is Running (terminating), never Failed without its reason, even under Never."""
    import threading

    m = make_manager(tmp_path, driver)
    await m.create_pod(manifest("victim", restart=restart))
    await until(lambda: pid_of(m, "victim"), what="the victim running")
    worker = m.pods[("default", "victim")]
    gate = threading.Event()

    def slow_sync(fd: int) -> None:
        gate.wait(10)
        os.fdatasync(fd)

    m.journal._sync = slow_sync
    stopping = m.terminate(worker, 0, remove=False, reason="Evicted", message="The node was low on resource: memory.")
    await until(lambda: not worker.running, what="the victim killed before its record is written")
    shown = m.get_pod("default", "victim")
    assert shown is not None and shown["status"].get("reason") is None and shown["status"]["phase"] == "Running", shown
    gate.set()
    await stopping
    await until(lambda: (m.get_pod("default", "victim") or {}).get("status", {}).get("reason") == "Evicted",
                what="Evicted once recorded")
    shown = m.get_pod("default", "victim")
    assert shown is not None and shown["status"]["phase"] == "Failed"
    # the kubelet's DisruptionTarget condition (PodDisruptionConditions), with the eviction's message
    assert [(c["status"], c.get("reason"), c.get("message")) for c in shown["status"]["conditions"]
            if c["type"] == "DisruptionTarget"] == [("True", "TerminationByKubelet", "The node was low on resource: memory.")]
    record = durable(tmp_path, "victim")
    assert record is not None and record.deletion is not None and record.deletion.reason == "Evicted"
    m.journal._sync = os.fdatasync
    await stop_all(m)


async def test_a_pod_that_ended_keeps_its_phase_while_its_delete_is_committed(tmp_path: Path,
                                                                             driver: FakeCgroupDriver) -> None:
    """Only an eviction's kill runs ahead of its record: a delete is on disk before it kills, so
    a pod that had already failed is never shown Running meanwhile."""
    import threading

    m = make_manager(tmp_path, driver)
    await m.create_pod(manifest("done", "exit 3", restart="Never"))
    await until(lambda: (m.get_pod("default", "done") or {}).get("status", {}).get("phase") == "Failed",
                what="the pod to fail")
    gate = threading.Event()

    def slow_sync(fd: int) -> None:
        gate.wait(10)
        os.fdatasync(fd)

    m.journal._sync = slow_sync
    deleting = asyncio.ensure_future(m.delete_pod("default", "done", 0))
    await asyncio.sleep(0.1)
    assert not deleting.done()
    assert m.get_pod("default", "done")["status"]["phase"] == "Failed"  # type: ignore[index]
    gate.set()
    await deleting
    m.journal._sync = os.fdatasync
    await until(lambda: m.get_pod("default", "done") is None, what="the pod removed")
    await stop_all(m)


async def test_deleting_an_evicted_pod_removes_it_and_its_record(tmp_path: Path, driver: FakeCgroupDriver) -> None:
    """An evicted pod stays listed as Failed until deleted; the delete removes it (and its record,
    so a restarted agent does not list it again), keeping the eviction's reason meanwhile."""
    m = make_manager(tmp_path, driver)
    await m.create_pod(manifest("victim"))
    await until(lambda: pid_of(m, "victim"), what="the victim running")
    await m.terminate(m.pods[("default", "victim")], 0, remove=False, reason="Evicted", message="low on memory")
    await until(lambda: (m.get_pod("default", "victim") or {}).get("status", {}).get("reason") == "Evicted",
                what="Evicted")
    out = await m.delete_pod("default", "victim", None)
    assert out is not None and out["status"]["reason"] == "Evicted"
    await until(lambda: m.get_pod("default", "victim") is None, what="the evicted pod removed")
    await m.flush()
    assert durable(tmp_path, "victim") is None
    await stop_all(m)
    again = make_manager(tmp_path, driver)
    await again.restore()
    assert again.get_pod("default", "victim") is None
    await stop_all(again)


async def test_a_delete_during_an_eviction_removes_the_pod_when_the_stop_ends(tmp_path: Path,
                                                                              driver: FakeCgroupDriver) -> None:
    m = make_manager(tmp_path, driver)
    ready = tmp_path / "ready"
    await m.create_pod(manifest("slow", f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done"))
    pid = await until(lambda: pid_of(m, "slow"), what="a pid")
    await until(ready.exists, what="the trap")
    stopping = m.terminate(m.pods[("default", "slow")], 1, remove=False, reason="Evicted", message="low")
    out = await m.delete_pod("default", "slow", 30)
    assert out is not None and alive(pid), "the delete must not cut the eviction's grace short or wait for it"
    await stopping
    assert m.get_pod("default", "slow") is None
    await m.flush()
    assert durable(tmp_path, "slow") is None
    await stop_all(m)
