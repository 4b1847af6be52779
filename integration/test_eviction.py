"""Eviction on a real kernel: memory, disk and inode pressure against a real agent process (root).

Host (cgroup v1):      .venv/bin/pytest integration/test_eviction.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_eviction.py -q

Memory: on the 24 GiB host, node-level pressure is impractical, so the agent gets a small enforced
allocatable (systemReserved = capacity - 600Mi: kubepods has a real 600Mi limit) and the
thresholds are on allocatableMemory.available. In the 1 GiB guest the thresholds are on the node's
memory.available, placed a fixed headroom below what is available when the test starts.
Hogs are sized after every pod is up, from the headroom read off the kernel (eviction_helpers).
Disk: the agent's stateDir is a small tmpfs of the test's own (size= / nr_inodes=), and pods
write into their own directory under it (their ephemeral storage).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, is_running, poll_until
from eviction_helpers import (
    MI,
    DeathWatch,
    EvictionAgent,
    Hogs,
    assert_evicted,
    condition,
    evicted_names,
    fill_manifest,
    hog_manifest,
    log_events,
    meminfo,
    memory_signal_available,
    node_memory_available,
    pod_dir,
    statvfs_available,
    tmpfs,
)
from prometheus_client.parser import text_string_to_metric_families

KUBEPODS_MEMORY = 600 * MI  # the host's enforced allocatable for pods
AGENT_ALLOWANCE = 64 * MI  # what the agent itself takes in the guest once started
TRANSITION_S = 5.0
StartAgent = Callable[..., AgentProcess]


@pytest.fixture
def start_agent(tmp_path: Path, cgroup_version: int) -> Iterator[StartAgent]:
    """start(extra_config, fs=None | dict(size=, nr_inodes=)) -> a started agent; cleaned up after
    (pods deleted, cgroup root removed, then the tmpfs unmounted)."""
    agents: list[AgentProcess] = []
    mounts = ExitStack()

    def start(extra: dict[str, Any], fs: dict[str, Any] | None = None) -> AgentProcess:
        workdir = tmp_path / f"agent{len(agents)}"
        workdir.mkdir()
        agent = EvictionAgent(workdir, cgroup_version, extra_config=extra)
        if fs is not None:
            mounts.enter_context(tmpfs(agent.state_dir, **fs))
        agents.append(agent)
        agent.start()
        return agent

    try:
        yield start
    finally:
        errors = []
        try:
            for agent in agents:
                try:
                    agent.cleanup()
                except AssertionError as e:
                    errors.append(str(e))
        finally:
            mounts.close()
        assert not errors, "\n".join(errors)


def _mi(n: int) -> str:
    return f"{n // MI}Mi"


def memory_setup(version: int, headroom: int) -> tuple[str, int, dict[str, Any]]:
    """(signal, the threshold at `headroom` below what pods may use now, base config)."""
    base: dict[str, Any] = {"evictionPressureTransitionPeriod": f"{TRANSITION_S:g}s",
                            "kubeReserved": {"cpu": "100m"}}
    if version == 1:
        capacity = meminfo()["MemTotal"]
        base["systemReserved"] = {"cpu": "100m", "memory": str(capacity - KUBEPODS_MEMORY)}
        return "allocatableMemory.available", KUBEPODS_MEMORY - headroom, base
    base["systemReserved"] = {"cpu": "100m"}
    threshold = (node_memory_available() - AGENT_ALLOWANCE - headroom) // MI * MI
    assert threshold >= 100 * MI, f"the guest has too little memory for a {_mi(headroom)} headroom"
    return "memory.available", threshold, base


def headroom(agent: AgentProcess, signal: str, threshold: int) -> int:
    return memory_signal_available(agent, signal) - threshold


def start_hogs(agent: AgentProcess, hogs: Hogs, specs: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Create hog pods and wait until each interpreter waits for its go file; their pids."""
    for name, kw in specs.items():
        agent.create_ok(hog_manifest(name, hogs.ctl, **kw))
    pids = {name: hogs.ready(name) for name in specs}
    for name, pid in pids.items():
        assert agent.wait_running(name, timeout=60)[0] == pid
    return pids


def metric_samples(agent: AgentProcess) -> list[Any]:
    status, text = agent.request("GET", "/metrics")
    assert status == 200, text
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def assert_eviction_metrics(agent: AgentProcess, signal: str, threshold: int, evicted: int) -> None:
    """/metrics after the real evictions, while MemoryPressure still holds: the kubelet's counter
    by signal, the reaction histogram (one observation per pass that evicted), the condition,
    the threshold and the Failed pods."""
    samples = metric_samples(agent)

    def value(name: str, **labels: str) -> float:
        found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return float(found[0])

    assert value("kubelet_evictions", eviction_signal=signal) == evicted
    assert value("nodeagent_evictions_total", eviction_signal=signal) == evicted
    passes = value("nodeagent_eviction_reaction_seconds_count", signal=signal)
    assert 1 <= passes <= evicted, passes
    assert 0 < value("nodeagent_eviction_reaction_seconds_sum", signal=signal) < passes * 10
    assert value("nodeagent_node_condition", condition="MemoryPressure", status="true") == 1
    assert value("nodeagent_eviction_threshold_bytes", signal=signal, kind="hard") == threshold
    assert value("nodeagent_eviction_signal_available_bytes", signal=signal) > 0
    failed = sum(s.value for s in samples if s.name == "nodeagent_pods" and s.labels.get("phase") == "Failed")
    assert failed == evicted, failed


def no_oom_kills(agent: AgentProcess) -> None:
    assert agent.cg.oom_kills("kubepods") == 0, "the kernel OOM-killed in kubepods: the agent lost the race"


# ---------------------------------------------------------------- memory


def test_hard_threshold_evicts_in_rank_order(start_agent: StartAgent, tmp_path: Path, cgroup_version: int) -> None:
    signal, threshold, extra = memory_setup(cgroup_version, headroom=400 * MI)
    agent = start_agent({**extra, "evictionHard": {signal: _mi(threshold)}})
    upper = headroom(agent, signal, threshold)
    hogs = Hogs(tmp_path / "ctl")
    pids = start_hogs(agent, hogs, {
        "critical": dict(priority_class="system-cluster-critical"),
        "guaranteed": dict(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "100m", "memory": "64Mi"}),
        "besteffort": {},
        "burstable": dict(requests={"memory": "16Mi"}),
        "within": dict(requests={"memory": _mi(int(upper * 0.9))}),  # stays below its request
    })
    hogs.allocate("critical", 16 * MI)
    hogs.allocate("guaranteed", 16 * MI)
    h = headroom(agent, signal, threshold)
    assert h > 200 * MI, h
    hogs.allocate("besteffort", int(0.4 * h), step=16 * MI)
    hogs.allocate("burstable", int(0.3 * h), step=16 * MI)
    assert not condition(agent, "MemoryPressure") and not evicted_names(agent)
    deaths = {n: DeathWatch(pids[n]) for n in ("besteffort", "burstable")}
    # `within` crosses the line at about 0.3h (besteffort goes), and again near 0.7h (burstable
    # goes); it ends at 0.8h, below the line, so it is never a victim itself.
    left = headroom(agent, signal, threshold)
    hogs.go("within", int(0.8 * h), step=int(0.05 * h), interval=0.1, cross=left)
    deaths["besteffort"].wait(60)
    assert condition(agent, "MemoryPressure")
    last = deaths["burstable"].wait(60)
    hogs.wait("within", "done", 60)

    assert evicted_names(agent) == ["besteffort", "burstable"]
    for name in ("besteffort", "burstable"):
        assert_evicted(agent, name, "memory", f"Threshold quantity: {_mi(threshold)}", "Container main was using")
    for name in ("critical", "guaranteed", "within"):
        assert is_running(pids[name]), f"{name} should have survived"
        assert agent.pod(name)["status"]["phase"] == "Running"  # type: ignore[index]
    assert agent.alive and agent.request("GET", "/healthz", auth=False)[0] == 200
    no_oom_kills(agent)
    assert_eviction_metrics(agent, signal, threshold, evicted=2)
    # the condition holds for the transition period after the last time the signal was met
    time.sleep(max(0.0, last + 3.0 - time.monotonic()))
    assert condition(agent, "MemoryPressure"), "cleared before evictionPressureTransitionPeriod"
    poll_until(lambda: not condition(agent, "MemoryPressure"), TRANSITION_S + 15, "MemoryPressure to clear")
    assert time.monotonic() - last >= TRANSITION_S - 1.0
    assert evicted_names(agent) == ["besteffort", "burstable"]


def test_soft_threshold_waits_for_its_grace_period(start_agent: StartAgent, tmp_path: Path,
                                                   cgroup_version: int) -> None:
    signal, soft, extra = memory_setup(cgroup_version, headroom=350 * MI)
    grace_s, max_pod_grace = 4.0, 2
    agent = start_agent({**extra, "evictionHard": {signal: _mi(soft - 150 * MI)},
                         "evictionSoft": {signal: _mi(soft)}, "evictionSoftGracePeriod": {signal: f"{grace_s:g}s"},
                         "evictionMaxPodGracePeriod": max_pod_grace})
    hogs = Hogs(tmp_path / "ctl")
    pid = start_hogs(agent, hogs, {"hog": dict(grace=30)})["hog"]
    death = DeathWatch(pid)
    h = headroom(agent, signal, soft)
    # over the soft line by 48Mi, 100Mi short of the hard one; the hog ignores SIGTERM
    hogs.go("hog", h + 48 * MI, step=16 * MI, cross=h, ignore_term=True)
    crossed = float(hogs.wait("hog", "cross", 30))
    poll_until(lambda: condition(agent, "MemoryPressure"), 10, "MemoryPressure (conditions ignore grace)")
    time.sleep(max(0.0, crossed + grace_s - 1.0 - time.monotonic()))
    assert hogs.stamp("hog", "term") is None and not evicted_names(agent), "evicted before the grace period"
    term = float(hogs.wait("hog", "term", 30))
    assert grace_s - 0.5 <= term - crossed <= grace_s + 6, term - crossed
    died = death.wait(30)
    # SIGTERM, then SIGKILL after min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds) = 2 s.
    # The lower bound is timed by the agent's own log (its SIGTERM to its SIGKILL): the hog's `term`
    # stamp is when its handler ran, which a loaded guest under memory pressure can delay by a second.
    assert died - term <= max_pod_grace + 5, died - term
    stopping = [e for e in log_events(agent) if e["event"] == "container_stopping" and e.get("pid") == pid]
    expired = [e for e in log_events(agent) if e["event"] == "container_grace_expired" and e.get("pid") == pid]
    assert len(stopping) == 1 and len(expired) == 1, (stopping, expired)
    assert stopping[0]["grace_period"] == max_pod_grace, stopping
    given = (datetime.fromisoformat(expired[0]["timestamp"])
             - datetime.fromisoformat(stopping[0]["timestamp"])).total_seconds()
    assert max_pod_grace - 0.1 <= given <= max_pod_grace + 5, given
    assert_evicted(agent, "hog", "memory", f"Threshold quantity: {_mi(soft)}")
    assert evicted_names(agent) == ["hog"]
    no_oom_kills(agent)


def test_minimum_reclaim_keeps_evicting(start_agent: StartAgent, tmp_path: Path, cgroup_version: int) -> None:
    signal, threshold, extra = memory_setup(cgroup_version, headroom=400 * MI)
    reclaim = 120 * MI
    agent = start_agent({**extra, "evictionHard": {signal: _mi(threshold)},
                         "evictionMinimumReclaim": {signal: _mi(reclaim)}})
    upper = headroom(agent, signal, threshold)
    hogs = Hogs(tmp_path / "ctl")
    p1, p2, p3 = int(0.75 * reclaim), int(0.75 * reclaim) - 8 * MI, 16 * MI
    pids = start_hogs(agent, hogs, {"p1": {}, "p2": {}, "p3": {},
                                    "trigger": dict(requests={"memory": _mi(int(upper * 0.95))})})
    for name, size in (("p1", p1), ("p2", p2), ("p3", p3)):
        hogs.allocate(name, size)
    h = headroom(agent, signal, threshold)
    assert h > 64 * MI, (h, "too little headroom left for the trigger")
    watches = {n: DeathWatch(pids[n]) for n in ("p1", "p2")}
    excess = int(0.1 * reclaim)  # p1 alone would cover this excess; with minReclaim it cannot
    hogs.go("trigger", h + excess, step=h + excess, cross=h)
    for w in watches.values():
        w.wait(60)
    hogs.wait("trigger", "done", 60)
    assert evicted_names(agent) == ["p1", "p2"]
    assert_evicted(agent, "p1", "memory")
    assert all(is_running(pids[n]) for n in ("p3", "trigger")), evicted_names(agent)
    assert memory_signal_available(agent, signal) > threshold + reclaim
    no_oom_kills(agent)


def test_besteffort_refused_under_memory_pressure(start_agent: StartAgent, tmp_path: Path,
                                                  cgroup_version: int) -> None:
    # a soft threshold with a long grace period: pressure without eviction for the whole test
    signal, soft, extra = memory_setup(cgroup_version, headroom=300 * MI)
    agent = start_agent({**extra, "evictionHard": {}, "evictionSoft": {signal: _mi(soft)},
                         "evictionSoftGracePeriod": {signal: "10m"}})
    hogs = Hogs(tmp_path / "ctl")
    start_hogs(agent, hogs, {"hog": {}})
    hogs.allocate("hog", headroom(agent, signal, soft) + 32 * MI)
    poll_until(lambda: condition(agent, "MemoryPressure"), 10, "MemoryPressure")

    def sleeper(name: str, **spec: Any) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "command": ["sleep", "100000"], "resources": spec.pop("res", {})}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [container], **spec}}

    status, body = agent.create(sleeper("be"))
    assert status == 422, (status, body)
    assert body["reason"] == "Evicted" and body["message"] == "The node had condition: [MemoryPressure]. ", body
    events = agent.request("GET", "/api/v1/events")[1]["items"]
    assert [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == "be"] == [
        ("Evicted", body["message"])], events
    agent.create_ok(sleeper("burstable", res={"requests": {"memory": "8Mi"}}))
    agent.create_ok(sleeper("critical-be", priorityClassName="system-node-critical"))
    assert agent.pod("be") is None
    assert agent.delete("hog", grace=0)[0] == 200
    poll_until(lambda: not condition(agent, "MemoryPressure"), TRANSITION_S + 20, "MemoryPressure to clear")
    agent.create_ok(sleeper("be"))
    assert not evicted_names(agent)


# ---------------------------------------------------------------- disk and inodes

DISK_FS = {"size": "64m"}
INODE_FS = {"size": "64m", "nr_inodes": 2000}
DISK_T = 24 * MI
INODE_T = 500


def _fill(agent: AgentProcess, name: str, *, files: int, size: int, then: str) -> tuple[str, str]:
    uid = str(uuid.uuid4())
    d = pod_dir(agent, name, uid)
    agent.create_ok(fill_manifest(name, uid, d, count=files, size=size, then=then))
    return uid, d


def _filled(d: str) -> bool:
    return Path(d, "filled").exists()


def _phase(agent: AgentProcess, name: str) -> str | None:
    pod = agent.pod(name)
    return pod["status"]["phase"] if pod else None


@pytest.mark.parametrize("enough", [True, False], ids=["garbage-enough", "garbage-short"])
@pytest.mark.parametrize("resource", ["bytes", "inodes"])
def test_disk_pressure_reclaims_garbage_first(start_agent: StartAgent, resource: str, enough: bool) -> None:
    inodes = resource == "inodes"
    signal, threshold = ("nodefs.inodesFree", INODE_T) if inodes else ("nodefs.available", DISK_T)
    agent = start_agent({"evictionHard": {signal: str(threshold) if inodes else _mi(threshold)},
                         "evictionPressureTransitionPeriod": f"{TRANSITION_S:g}s"},
                        fs=INODE_FS if inodes else DISK_FS)
    state = str(agent.state_dir)

    def free() -> int:
        return statvfs_available(state)[1 if inodes else 0]

    def files_for(amount: int) -> tuple[int, int]:  # (file count, bytes each) that use `amount`
        return (amount, 0) if inodes else (1, amount)

    # a bystander with a little data, then garbage: a pod that wrote its data and completed
    _, small = _fill(agent, "bystander", files=10, size=64 << 10, then="sleep")
    poll_until(lambda: _filled(small), 30, "bystander to write")
    garbage_amount = (700 if enough else 60) if inodes else (28 * MI if enough else 6 * MI)
    _, garbage = _fill(agent, "done", **dict(zip(("files", "size"), files_for(garbage_amount), strict=False)), then="exit")
    poll_until(lambda: _phase(agent, "done") == "Succeeded", 30, "the garbage pod to complete")
    bystander_pid = agent.wait_running("bystander")[0]
    # the filler takes the node below the threshold; reclaiming the garbage gets it back above
    # (enough) or leaves it short, so the filler (the largest user) is evicted
    below = (100 if enough else 150) if inodes else (6 * MI if enough else 12 * MI)
    amount = free() - (threshold - below)
    _, big = _fill(agent, "filler", **dict(zip(("files", "size"), files_for(amount), strict=False)), then="sleep")
    poll_until(lambda: condition(agent, "DiskPressure"), 30, "DiskPressure")
    status, body = agent.create(fill_manifest("late", str(uuid.uuid4()), "/nonexistent", count=0, size=0, then="exit"))
    assert status == 422 and body["reason"] == "Evicted" and "DiskPressure" in body["message"], (status, body)
    poll_until(lambda: not Path(garbage).exists(), 30, "the completed pod's data to be reclaimed")
    if enough:
        poll_until(lambda: not condition(agent, "DiskPressure"), TRANSITION_S + 20, "DiskPressure to clear")
        assert not evicted_names(agent)
        assert _phase(agent, "filler") == "Running" and Path(big, "filled").exists()
        lines = [e["event"] for e in log_events(agent)]
        assert "eviction_reclaimed_node_garbage" in lines
    else:
        word = "inodes" if inodes else "ephemeral-storage"
        assert_evicted(agent, "filler", f"The node was low on resource: {word}")
        assert evicted_names(agent) == ["filler"]
        # the garbage went first, then the eviction; the evicted pod's data is garbage in turn
        # (the filler's eviction event, not any event: the refused 'late' pod records one of its own)
        kinds = [e["event"] if e["event"] == "node_garbage_reclaimed" else "filler_evicted"
                 for e in log_events(agent)
                 if e["event"] == "node_garbage_reclaimed"
                 or (e["event"] == "event_recorded" and e.get("reason") == "Evicted"
                     and str(e.get("object", "")).endswith("/filler"))]
        assert "node_garbage_reclaimed" in kinds and kinds.index("node_garbage_reclaimed") < kinds.index("filler_evicted")
        poll_until(lambda: not Path(big).exists(), 30, "the evicted pod's data to be reclaimed")
        poll_until(lambda: free() > threshold, 30, f"{signal} back above the threshold")
    assert is_running(bystander_pid) and _phase(agent, "bystander") == "Running"
    assert agent.alive
