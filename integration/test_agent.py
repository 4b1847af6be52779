"""The agent daemon end to end, through its HTTP API, on a real kernel (as root).

Host (cgroup v1):      .venv/bin/pytest integration/test_agent.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_agent.py -q

Each test starts `python -m nodeagent run` as a process of its own (see agent_harness.py) with its
own state dir, cgroup root `/nodeagent-it-<random>` and port, and removes all of it afterwards.
Only processes inside that cgroup root are ever killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import (
    HOUSEKEEPING_S,
    KUBE_RESERVED,
    NODE_NAME,
    SYSTEM_RESERVED,
    AgentProcess,
    container_status,
    pod_manifest,
    poll_until,
    running_pid,
)
from kernel_view import container_id_parts, cpu_is, expect_cpu, expect_memory, is_running

from nodeagent.agent.node.procfs import has_cap_sys_resource
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.journal import CheckpointJournal
from nodeagent.agent.runtime.spawn import clamp_oom_score_adj
from nodeagent.core.model import parse_pod
from nodeagent.core.qos import is_node_critical, oom_score_adj, qos_class
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import milli_cpu_to_shares, shares_to_cpu_weight

MI = 1 << 20
SLEEP = "exec sleep 100000"
BUSY = "while :; do :; done"


def _uid() -> str:
    return str(uuid.uuid4())


def _capacity(agent: AgentProcess) -> dict[str, Any]:
    return {k: parse_quantity(v) for k, v in agent.node()["status"]["capacity"].items()}


GUARANTEED = dict(limits={"cpu": "250m", "memory": "64Mi"})
BURSTABLE_CONTAINERS = [
    {"name": "main", "command": ["/bin/sh", "-c", SLEEP],
     "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}},
    {"name": "side", "command": ["/bin/sh", "-c", SLEEP], "resources": {"requests": {"cpu": "50m"}}},
]


# ---- 1. cgroup values for each QoS class ----


def test_cgroup_values_for_each_qos_class(agent: AgentProcess) -> None:
    g, b, be = _uid(), _uid(), _uid()
    agent.create_ok(pod_manifest("guaranteed", SLEEP, uid=g, **GUARANTEED))  # type: ignore[arg-type]
    agent.create_ok(pod_manifest("burstable", "", uid=b, containers=BURSTABLE_CONTAINERS))
    agent.create_ok(pod_manifest("besteffort", SLEEP, uid=be))
    g_pid, _ = agent.wait_running("guaranteed")
    b_pid, _ = agent.wait_running("burstable")
    agent.wait_running("burstable", container="side")
    be_pid, _ = agent.wait_running("besteffort")
    assert agent.pod("guaranteed")["status"]["qosClass"] == "Guaranteed"  # type: ignore[index]
    assert agent.pod("burstable")["status"]["qosClass"] == "Burstable"  # type: ignore[index]
    assert agent.pod("besteffort")["status"]["qosClass"] == "BestEffort"  # type: ignore[index]

    # Guaranteed: directly under kubepods; pod and container limited alike.
    for path in (f"kubepods/pod{g}", f"kubepods/pod{g}/main"):
        expect_cpu(agent.cg, path, shares=256, quota=25000)
        expect_memory(agent.cg, path, 64 * MI)
    # Burstable: the pod has a quota / memory.max only if every container sets that limit.
    expect_cpu(agent.cg, f"kubepods/burstable/pod{b}", shares=milli_cpu_to_shares(150), quota=None)
    expect_memory(agent.cg, f"kubepods/burstable/pod{b}", None)
    expect_cpu(agent.cg, f"kubepods/burstable/pod{b}/main", shares=102, quota=20000)
    expect_memory(agent.cg, f"kubepods/burstable/pod{b}/main", 64 * MI)
    expect_cpu(agent.cg, f"kubepods/burstable/pod{b}/side", shares=51, quota=None)
    expect_memory(agent.cg, f"kubepods/burstable/pod{b}/side", None)
    # BestEffort: the minimum weight, no limits.
    for path in (f"kubepods/besteffort/pod{be}", f"kubepods/besteffort/pod{be}/main"):
        expect_cpu(agent.cg, path, shares=2, quota=None)
        expect_memory(agent.cg, path, None)

    # Each process sits in its own container's cgroup (every hierarchy on v1).
    for pid, path in ((g_pid, f"kubepods/pod{g}/main"), (b_pid, f"kubepods/burstable/pod{b}/main"),
                      (be_pid, f"kubepods/besteffort/pod{be}/main")):
        for controller in ("cpu", "memory"):
            assert pid in agent.cg.pids(path, controller), (pid, path, controller)

    # QoS tiers: besteffort the minimum, burstable the sum of its pods' cpu requests.
    expect_cpu(agent.cg, "kubepods/besteffort", shares=2, quota=None)
    expect_cpu(agent.cg, "kubepods/burstable", shares=milli_cpu_to_shares(150), quota=None)

    # kubepods: capacity - kubeReserved - systemReserved (the eviction threshold is not subtracted).
    cap = _capacity(agent)
    reserved_mem = sum(parse_quantity(r["memory"]).value() for r in (KUBE_RESERVED, SYSTEM_RESERVED))
    reserved_cpu = sum(parse_quantity(r["cpu"]).milli_value() for r in (KUBE_RESERVED, SYSTEM_RESERVED))
    expect_memory(agent.cg, "kubepods", cap["memory"].value() - reserved_mem)
    expect_cpu(agent.cg, "kubepods", shares=milli_cpu_to_shares(cap["cpu"].milli_value() - reserved_cpu), quota=None)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if agent.cg.version == 2 or "pids" in agent.cg.bases:
        assert agent.cg.read("kubepods", "pids", "pids.max") == str(pid_max)

    # The burstable tier follows its pods: back to the minimum once the pod is gone.
    assert agent.delete("burstable", grace=0)[0] == 200
    poll_until(lambda: agent.pod("burstable") is None, 20, "the burstable pod to go")
    assert not agent.cg.exists(f"kubepods/burstable/pod{b}")
    poll_until(lambda: cpu_is(agent.cg, "kubepods/burstable", shares=2, quota=None), 10, "the tier's weight to drop")


# ---- 2. oom_score_adj ----


def test_oom_score_adj_per_qos_class(agent: AgentProcess) -> None:
    manifests = {
        "guaranteed": pod_manifest("guaranteed", SLEEP, **GUARANTEED),  # type: ignore[arg-type]
        "burstable": pod_manifest("burstable", "", containers=[
            {"name": "main", "command": ["/bin/sh", "-c", SLEEP], "resources": {"requests": {"memory": "256Mi"}}},
            {"name": "side", "command": ["/bin/sh", "-c", SLEEP], "resources": {"requests": {"cpu": "10m"}}},
        ]),
        "besteffort": pod_manifest("besteffort", SLEEP),
    }
    for m in manifests.values():
        agent.create_ok(m)
    memory_capacity = _capacity(agent)["memory"].value()
    seen = {}
    for name, m in manifests.items():
        pod = parse_pod(m)
        for c in pod.spec.containers:
            pid, _ = agent.wait_running(name, container=c.name)
            request = c.resources.requests.get("memory")
            adj = oom_score_adj(qos_class(pod), is_node_critical(pod), request.value() if request else 0, memory_capacity)
            expected = clamp_oom_score_adj(adj)
            actual = int(Path(f"/proc/{pid}/oom_score_adj").read_text())
            assert actual == expected, (name, c.name, actual, expected)
            seen[(name, c.name)] = actual
    assert seen[("besteffort", "main")] == 1000
    assert seen[("burstable", "side")] == 999  # no memory request: just below BestEffort
    assert 3 <= seen[("burstable", "main")] < 999
    if has_cap_sys_resource():  # the UML guest; the host's bounding set lacks CAP_SYS_RESOURCE
        assert seen[("guaranteed", "main")] == -997


def _nice(pid: int, tid: int | None = None) -> int:
    """Field 19 of /proc/<pid>[/task/<tid>]/stat (after the parenthesised comm)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return int(Path(path).read_text().rsplit(")", 1)[1].split()[16])


def test_agent_runs_ahead_of_its_pods_which_start_at_nice_0(agent: AgentProcess) -> None:
    """The loop thread (the one running eviction passes) at the configured nice (-10 by default)
    with reset-on-fork; a pod spawned by it back at nice 0 with the normal policy, and so are the
    agent's later worker threads (reset-on-fork covers threads too)."""
    assert agent.proc is not None
    agent.create_ok(pod_manifest("plain", SLEEP))
    pid, _ = agent.wait_running("plain")
    assert _nice(agent.proc.pid) == -10
    assert os.sched_getscheduler(agent.proc.pid) == os.SCHED_OTHER | os.SCHED_RESET_ON_FORK
    assert _nice(pid) == 0
    assert os.sched_getscheduler(pid) == os.SCHED_OTHER
    workers = [int(t) for t in os.listdir(f"/proc/{agent.proc.pid}/task") if int(t) != agent.proc.pid]
    assert all(_nice(agent.proc.pid, tid) == 0 for tid in workers), workers


# ---- 3. OOM kills ----

ALLOCATE = "l = []\nwhile True:\n    l.append(b'x' * (1 << 20))\n"


def test_oom_kill_is_reported_and_restarted_per_policy(agent: AgentProcess) -> None:
    always, never = _uid(), _uid()
    hog = [sys.executable, "-c", ALLOCATE]
    agent.create_ok(pod_manifest("oom-always", hog, uid=always, limits={"memory": "64Mi"}))
    agent.create_ok(pod_manifest("oom-never", hog, uid=never, limits={"memory": "64Mi"}, restart="Never"))

    def restarted_after_oom() -> dict[str, Any] | None:
        cs = container_status(agent.pod("oom-always"))  # type: ignore[arg-type]
        last = cs["lastState"].get("terminated", {})
        return cs if cs["restartCount"] >= 1 and last.get("reason") == "OOMKilled" else None

    cs = poll_until(restarted_after_oom, 30, "oom-always to be OOM-killed and restarted")
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert cs["lastState"]["terminated"]["signal"] == signal.SIGKILL
    assert agent.pod("oom-always")["status"]["phase"] == "Running"  # type: ignore[index]

    pod = poll_until(lambda: (p := agent.pod("oom-never")) and p["status"]["phase"] == "Failed" and p,
                     30, "oom-never to fail")
    cs = container_status(pod)
    assert cs["state"]["terminated"]["reason"] == "OOMKilled", cs
    assert cs["state"]["terminated"]["exitCode"] == 137
    assert cs["restartCount"] == 0
    # The kernel did it: the container cgroups count the OOM kills.
    assert agent.cg.oom_kills(f"kubepods/burstable/pod{never}/main") >= 1
    assert agent.cg.oom_kills(f"kubepods/burstable/pod{always}/main") >= 1


# ---- 4. cpu quota ----

MEASURE_S = 3.0


def _usage_over(agent: AgentProcess, paths: list[str], seconds: float) -> tuple[list[int], float]:
    """cpu time (us) each cgroup used during `seconds` of wall time, and the wall time."""
    before = [agent.cg.cpu_usage_usec(p) for p in paths]
    t0 = time.monotonic()
    time.sleep(seconds)  # the measurement window, not a wait for something to happen
    after = [agent.cg.cpu_usage_usec(p) for p in paths]
    return [a - b for a, b in zip(after, before, strict=True)], time.monotonic() - t0


def test_cpu_limit_throttles_to_quota(agent: AgentProcess) -> None:
    uid = _uid()
    agent.create_ok(pod_manifest("spin", BUSY, uid=uid, limits={"cpu": "200m", "memory": "32Mi"}))
    agent.wait_running("spin")
    pod_path = f"kubepods/pod{uid}"
    throttled_before = agent.cg.nr_throttled(pod_path) + agent.cg.nr_throttled(f"{pod_path}/main")
    (used,), wall = _usage_over(agent, [pod_path], MEASURE_S)
    throttled = agent.cg.nr_throttled(pod_path) + agent.cg.nr_throttled(f"{pod_path}/main") - throttled_before
    share = used / 1e6 / wall
    assert throttled > 0
    assert 0.1 <= share <= 0.3, f"a 200m quota used {share:.3f} CPU"


# ---- 5. cpu weights ----


def test_cpu_requests_share_one_cpu_by_weight(agent: AgentProcess) -> None:
    small, big = _uid(), _uid()
    pinned = f"exec taskset -c 0 /bin/sh -c '{BUSY}'"  # one CPU for both (the guest has only one)
    # 1:3 in requests; 150m + 450m fits the guest's 800m allocatable (1 CPU - 200m reserved)
    agent.create_ok(pod_manifest("small", pinned, uid=small, requests={"cpu": "150m"}))
    agent.create_ok(pod_manifest("big", pinned, uid=big, requests={"cpu": "450m"}))
    agent.wait_running("small")
    agent.wait_running("big")
    paths = [f"kubepods/burstable/pod{small}", f"kubepods/burstable/pod{big}"]
    _usage_over(agent, paths, 0.5)  # let the scheduler settle
    (used_small, used_big), _ = _usage_over(agent, paths, MEASURE_S)
    shares = (milli_cpu_to_shares(150), milli_cpu_to_shares(450))
    if agent.cg.version == 2:
        # The quadratic shares->weight map is not proportional: 1:3 in requests is 24:54 here.
        expected = shares_to_cpu_weight(shares[1]) / shares_to_cpu_weight(shares[0])
    else:
        expected = shares[1] / shares[0]
    ratio = used_big / max(used_small, 1)
    assert 0.75 * expected <= ratio <= 1.3 * expected, f"cpu time ratio {ratio:.2f}, weights say {expected:.2f}"


# ---- 6. graceful deletion ----


def test_delete_sends_sigterm_then_kills_after_grace(agent: AgentProcess, tmp_path: Path) -> None:
    marker, ready_a, ready_b = tmp_path / "term", tmp_path / "ready-a", tmp_path / "ready-b"
    polite = (f"trap 'echo TERM > {marker}; exit 0' TERM; echo ready > {ready_a}; "
              "while :; do sleep 0.2; done")
    stubborn = f"trap '' TERM; echo ready > {ready_b}; while :; do sleep 0.2; done"
    agent.create_ok(pod_manifest("polite", polite, grace=30))
    agent.create_ok(pod_manifest("stubborn", stubborn, grace=30))
    polite_pid, _ = agent.wait_running("polite")
    stubborn_pid, _ = agent.wait_running("stubborn")
    poll_until(lambda: ready_a.exists() and ready_b.exists(), 20, "both traps to be set")

    # A process that handles SIGTERM exits at once, long before its 30 s grace period.
    t0 = time.monotonic()
    assert agent.delete("polite")[0] == 200
    poll_until(lambda: not is_running(polite_pid), 15, "the polite process to exit")
    assert time.monotonic() - t0 < 15
    assert marker.read_text().strip() == "TERM"
    poll_until(lambda: agent.pod("polite") is None, 15, "polite to leave the pod list")

    # One that ignores SIGTERM is killed when the (request's) grace period is over, not before.
    grace = 2
    t0 = time.monotonic()
    assert agent.delete("stubborn", grace=grace)[0] == 200
    poll_until(lambda: not is_running(stubborn_pid), grace + 15, "the stubborn process to be killed",
               interval=0.02)
    elapsed = time.monotonic() - t0
    assert elapsed >= grace - 0.2, f"killed after {elapsed:.2f}s, before the {grace}s grace period"
    poll_until(lambda: agent.pod("stubborn") is None, 15, "stubborn to leave the pod list")


# ---- 7. admission ----


def test_pod_that_does_not_fit_is_refused_and_nothing_runs(agent: AgentProcess, tmp_path: Path) -> None:
    for resource, amount, reason in (("memory", "64Ti", "OutOfmemory"), ("cpu", "512", "OutOfcpu")):
        uid, marker = _uid(), tmp_path / f"ran-{resource}"
        status, body = agent.create(pod_manifest(f"huge-{resource}", f"touch {marker}; {SLEEP}", uid=uid,
                                                 requests={resource: amount}))
        assert status == 422, body
        assert body["reason"] == reason, body
        assert body["code"] == 422
        assert agent.pod(f"huge-{resource}") is None
        assert f"huge-{resource}" not in [p["metadata"]["name"] for p in agent.pods()]
        for parent in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            assert not agent.cg.exists(f"{parent}/pod{uid}")
        assert not marker.exists()
        # as the kubelet: the refusal is an event on the pod (and the recorder's log line)
        events = agent.request("GET", "/api/v1/events")[1]["items"]
        refused = [e for e in events if e["involvedObject"]["name"] == f"huge-{resource}"]
        assert [(e["reason"], e["type"], e["involvedObject"]["uid"]) for e in refused] == [(reason, "Warning", uid)]
        assert refused[0]["message"] == body["message"]
    # Refusals hold nothing back: a pod that fits is admitted and runs.
    agent.create_ok(pod_manifest("fits", SLEEP, requests={"cpu": "100m", "memory": "16Mi"}))
    agent.wait_running("fits")


def test_a_pod_naming_an_image_is_refused_unless_it_opts_into_host_mode(make_agent: Callable[..., AgentProcess],
                                                                        tmp_path: Path) -> None:
    """Without an OCI runtime containers are host processes: an `image` would be ignored and the
    command run on the host as root. So it is a 422 naming the field, and nothing runs, unless the
    pod says host mode. (With a runtime the image runs: integration/images/test_image_pods.py.)"""
    agent = make_agent(extra_config={"ociRuntime": "none"})
    marker = tmp_path / "ran"
    manifest = pod_manifest("imaged", f"touch {marker}; {SLEEP}", uid=_uid())
    manifest["spec"]["containers"][0]["image"] = "busybox:1.36"
    status, body = agent.create(manifest)
    assert status == 422 and body["reason"] == "Invalid", body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.containers[0].image"], body
    assert agent.pod("imaged") is None and not marker.exists()
    assert not agent.cg.exists(f"kubepods/besteffort/pod{manifest['metadata']['uid']}")
    manifest["metadata"]["annotations"] = {"nodeagent.io/host-process": "true"}
    agent.create_ok(manifest)
    agent.wait_running("imaged")
    poll_until(marker.exists, 30, "the command to run on the host")


# ---- 8. agent crash and restart ----


def _starts(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _checkpointed(agent: AgentProcess, name: str, pid: int) -> bool:
    record = CheckpointJournal(CheckpointStore(agent.state_dir)).read().get(("default", name))
    return record is not None and record.containers[0].pid == pid


def test_restart_readopts_pods_and_restarts_the_dead_per_policy(agent: AgentProcess, tmp_path: Path) -> None:
    names = ("keep", "died", "never")
    uids = {n: _uid() for n in names}
    log = {n: tmp_path / f"starts-{n}" for n in names}
    for n in names:
        agent.create_ok(pod_manifest(n, f"echo started >> {log[n]}; {SLEEP}", uid=uids[n],
                                     restart="Never" if n == "never" else "Always"))
    procs = {n: agent.wait_running(n) for n in names}
    ids = {n: container_status(agent.pod(n))["containerID"] for n in names}  # type: ignore[arg-type]
    for n in names:
        poll_until(lambda n=n: _checkpointed(agent, n, procs[n][0]), 10, f"{n}'s checkpoint")
        poll_until(lambda n=n: _starts(log[n]) == 1, 10, f"{n}'s command to run")

    # A clean stop (SIGTERM) leaves the pods running; the next agent adopts them.
    assert agent.stop() == 0
    assert all(is_running(*procs[n]) for n in names)
    agent.start()
    for n in names:
        assert container_status(agent.pod(n))["containerID"] == ids[n]  # type: ignore[arg-type]

    # kill -9: no shutdown code at all. Meanwhile two containers die.
    agent.crash()
    for n in ("died", "never"):
        os.kill(procs[n][0], signal.SIGKILL)
        poll_until(lambda n=n: not is_running(procs[n][0]), 10, f"{n}'s process to die")
    assert is_running(*procs["keep"])
    agent.start()

    keep = agent.pod("keep")
    cs = container_status(keep)  # type: ignore[arg-type]
    assert cs["containerID"] == ids["keep"] and cs["restartCount"] == 0 and "running" in cs["state"], cs
    assert is_running(*procs["keep"])
    died = poll_until(lambda: (p := agent.pod("died")) and (r := running_pid(p)) and agent.past_shim(r[0]) and p,
                      20, "died to be restarted")
    cs = container_status(died)
    assert cs["restartCount"] == 1 and cs["containerID"] != ids["died"], cs
    assert cs["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown", cs
    assert cs["lastState"]["terminated"]["containerID"] == ids["died"]
    never = poll_until(lambda: (p := agent.pod("never")) and p["status"]["phase"] == "Failed" and p,
                       20, "never to fail")
    cs = container_status(never)
    assert cs["restartCount"] == 0 and "terminated" in cs["state"], cs

    # Nothing was started twice: one start each, except the restarted one, and one process per pod.
    poll_until(lambda: _starts(log["died"]) == 2, 10, "the restarted command to run")
    assert (_starts(log["keep"]), _starts(log["died"]), _starts(log["never"])) == (1, 2, 1)
    assert agent.cg.pids(f"kubepods/besteffort/pod{uids['keep']}") == {procs["keep"][0]}
    new_pid = container_id_parts(cs_died := container_status(died)["containerID"])[0]
    assert agent.cg.pids(f"kubepods/besteffort/pod{uids['died']}") == {new_pid}, cs_died
    assert not agent.cg.pids(f"kubepods/besteffort/pod{uids['never']}")

    # The adopted process is still under control.
    assert agent.delete("keep", grace=5)[0] == 200
    poll_until(lambda: not is_running(procs["keep"][0]), 15, "the adopted process to stop")


# ---- 9. static pods ----


def _static_manifest(version: str, marker: Path) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
            f"  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n"
            f"    command: [/bin/sh, -c, 'echo {version} >> {marker}; exec sleep 100000']\n")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")  # dot files are ignored by the scan
    tmp.write_text(text)
    os.replace(tmp, path)


def test_static_pods_follow_their_files(make_agent: Callable[..., AgentProcess], tmp_path: Path) -> None:
    agent = make_agent(static_pods=True)
    assert agent.static_dir is not None
    name, marker, manifest = f"web-{NODE_NAME}", tmp_path / "web-starts", agent.static_dir / "web.yaml"
    within = 2 * HOUSEKEEPING_S + 3  # two housekeeping intervals, plus slack (it takes ~1 s on both kernels)

    _write_atomically(manifest, _static_manifest("v1", marker))
    pid1, start1 = agent.wait_running(name, timeout=within)
    first = agent.pod(name)
    assert first["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"  # type: ignore[index]

    # An edit replaces the pod: a new uid, a new process, the old one stopped.
    _write_atomically(manifest, _static_manifest("v2", marker))
    second = poll_until(lambda: (p := agent.pod(name)) and running_pid(p) and p["metadata"]["uid"]
                        != first["metadata"]["uid"] and p, within + 5, "the edited pod to run")  # type: ignore[index]
    pid2, start2 = running_pid(second)  # type: ignore[misc]
    assert (pid2, start2) != (pid1, start1)
    poll_until(lambda: not is_running(pid1, start1), 10, "the old static pod's process to stop")
    poll_until(lambda: marker.read_text().split() == ["v1", "v2"], 10, "the new command to run once")

    # A broken file is listed as InvalidManifest; the good pod keeps running untouched.
    _write_atomically(agent.static_dir / "broken.yaml", "metadata: {name: [unclosed\n")
    _write_atomically(agent.static_dir / "invalid.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n")

    def invalid_entries() -> list[str]:
        return sorted(p["metadata"]["name"] for p in agent.pods()
                      if p.get("status", {}).get("reason") == "InvalidManifest")

    poll_until(lambda: invalid_entries() == ["broken.yaml", "invalid.yaml"], within, "the InvalidManifest entries")
    assert running_pid(agent.pod(name)) == (pid2, start2)
    assert agent.alive

    # Removing the file stops the pod.
    manifest.unlink()
    poll_until(lambda: agent.pod(name) is None, within + 5, "the static pod to be removed")
    poll_until(lambda: not is_running(pid2, start2), 10, "its process to stop")
    assert invalid_entries() == ["broken.yaml", "invalid.yaml"]


# ---- 10. malformed input ----


def test_malformed_requests_are_refused_and_the_agent_carries_on(agent: AgentProcess) -> None:
    post = lambda body, ctype="application/json": agent.request("POST", "/api/v1/pods", body, content_type=ctype)
    assert post(b"{not json")[0] == 400
    assert post(b"[1, 2, 3]")[0] == 400
    assert post(b"\xff\xfe\x00garbage")[0] == 400
    assert post(b"")[0] == 400
    assert post(b"a: &a [1]\nb: *a\n", "application/yaml")[0] == 400
    assert post(b"{" * 100_000)[0] == 400
    status, body = post(b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": 7}}')
    assert status == 422 and body["reason"] == "Invalid", body
    status, body = agent.create(pod_manifest("BAD_NAME", SLEEP))
    assert status == 422, body
    status, body = agent.request("POST", "/api/v1/pods", b'{"kind": "Pod"}', auth=False)
    assert status == 401, body
    assert agent.request("DELETE", "/api/v1/namespaces/default/pods/x?gracePeriodSeconds=-1")[0] == 400
    assert agent.request("GET", "/api/v1/namespaces/default/pods/nope")[0] == 404
    status, _ = agent.request("POST", "/api/v1/pods", b"{" + b" " * ((1 << 20) + (64 << 10)) + b"}")
    assert status == 413

    assert agent.request("GET", "/healthz", auth=False) == (200, "ok")
    assert agent.alive
    agent.create_ok(pod_manifest("after", SLEEP))
    agent.wait_running("after")


STRANGER = """
import json, sys, urllib.request, urllib.error
method, base, out = sys.argv[1], sys.argv[2], {}
for path in sys.argv[3:]:
    req = urllib.request.Request(base + path, data=b"{}" if method == "POST" else None, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            out[path] = [r.status, r.read().decode(errors="replace")]
    except urllib.error.HTTPError as e:
        out[path] = [e.code, e.read().decode(errors="replace")]
print(json.dumps(out))
"""
READ_PATHS = ["/api/v1/pods", "/api/v1/node", "/api/v1/events", "/metrics", "/metrics/resource",
              "/stats/summary", "/api/v1/namespaces/default/pods/talker", "/api/v1/namespaces/default/pods/talker/log"]


def as_nobody(agent: AgentProcess, method: str, paths: list[str]) -> dict[str, tuple[int, str]]:
    """Each path over loopback TCP as the unprivileged user nobody (uid 65534), no credentials."""
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                          "-c", STRANGER, method, f"http://127.0.0.1:{agent.port}", *paths],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return {path: (code, body) for path, (code, body) in json.loads(out.stdout).items()}


def test_no_reads_for_strangers_unless_opted_in(make_agent: Callable[..., AgentProcess]) -> None:
    """The user nobody reaches the port on loopback but reads nothing: not a pod's log with a
    secret in it, not its spec, not /metrics; /healthz only. anonymousLoopbackReads opens reads."""
    secret = "SECRET-TOKEN=abc"
    for opt_in in (False, True):
        agent = make_agent(extra_config={"anonymousLoopbackReads": opt_in})
        manifest = pod_manifest("talker", f"echo {secret}; {SLEEP}")
        manifest["spec"]["containers"][0]["env"] = [{"name": "API_KEY", "value": "xyz-env-value"}]
        agent.create_ok(manifest)
        agent.wait_running("talker")
        poll_until(lambda agent=agent: secret in agent.request(
            "GET", "/api/v1/namespaces/default/pods/talker/log")[1], 30, "the secret in the log")
        answers = as_nobody(agent, "GET", [*READ_PATHS, "/healthz"])
        assert answers["/healthz"] == (200, "ok")
        if not opt_in:
            for path in READ_PATHS:
                code, body = answers[path]
                assert code == 401, (path, code, body)
                assert secret not in body and "xyz-env-value" not in body and "talker" not in body, (path, body)
        else:
            assert all(answers[p][0] == 200 for p in READ_PATHS), answers
            assert secret in answers["/api/v1/namespaces/default/pods/talker/log"][1]
            assert "xyz-env-value" in answers["/api/v1/namespaces/default/pods/talker"][1]
        assert as_nobody(agent, "POST", ["/api/v1/pods"])["/api/v1/pods"][0] == 401  # writes: never


def test_static_pod_files_changed_while_the_agent_was_down(make_agent: Callable[..., AgentProcess],
                                                           tmp_path: Path) -> None:
    agent = make_agent(static_pods=True)
    assert agent.static_dir is not None
    web, gone = agent.static_dir / "web.yaml", agent.static_dir / "gone.yaml"
    _write_atomically(web, _static_manifest("v1", tmp_path / "web"))
    _write_atomically(gone, _static_manifest("v1", tmp_path / "gone").replace("name: web", "name: gone"))
    web_pid = agent.wait_running(f"web-{NODE_NAME}", timeout=15)
    gone_pid = agent.wait_running(f"gone-{NODE_NAME}", timeout=15)

    assert agent.stop() == 0
    _write_atomically(web, _static_manifest("v2", tmp_path / "web"))
    gone.unlink()
    agent.start()

    poll_until(lambda: agent.pod(f"gone-{NODE_NAME}") is None, 15, "the removed file's pod to go")
    poll_until(lambda: not is_running(*gone_pid), 10, "its process to stop")
    new = poll_until(lambda: (p := running_pid(agent.pod(f"web-{NODE_NAME}"))) and p != web_pid and p,
                     15, "the edited pod to be replaced")
    poll_until(lambda: not is_running(*web_pid), 10, "the old web process to stop")
    poll_until(lambda: (tmp_path / "web").read_text().split() == ["v1", "v2"], 10, "v2 to run once")
    assert is_running(*new)
