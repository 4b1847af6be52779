"""In-place pod resize (KEP-1287) through the running agent's API, on a real kernel.

Host (cgroup v1):      .venv/bin/pytest integration/test_resize.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_resize.py -q

A real pod's memory and cpu limits are raised and lowered with PATCH pods/{name}/resize: the
cgroup files (memory.limit_in_bytes / memory.max, cpu.cfs_quota_us / cpu.max, cpu.shares /
cpu.weight) of the container and of the pod change while the very same process (PID and start
time) stays in them; a 200 survives a SIGKILL of the agent; a request beyond the node's
allocatable is Infeasible and leaves the cgroups alone; a memory limit below what the process
uses is held back; a QoS change is a 422 naming the field.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, container_status, pod_manifest, poll_until, running_pid
from kernel_view import expect_cpu, expect_memory

from nodeagent.core.resources import milli_cpu_to_shares

STRATEGIC = "application/strategic-merge-patch+json"
MI = 1 << 20


@pytest.fixture
def agent(tmp_path: Path, cgroup_version: int) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, cgroup_version)
    a.start()
    try:
        yield a
    finally:
        a.cleanup()


def resize(agent: AgentProcess, name: str, requests: dict[str, str] | None = None,
           limits: dict[str, str] | None = None, content_type: str = STRATEGIC) -> tuple[int, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    return agent.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/resize", json.dumps(body).encode(),
                         content_type=content_type)


def start_pod(agent: AgentProcess) -> tuple[str, str, tuple[int, int]]:
    """A Burstable pod (requests 100m/32Mi, limits 200m/64Mi): its pod and container cgroup paths, (pid, start)."""
    uid = str(uuid.uuid4())
    agent.create_ok(pod_manifest("web", "exec sleep 600", uid=uid, requests={"cpu": "100m", "memory": "32Mi"},
                                 limits={"cpu": "200m", "memory": "64Mi"}))
    proc = agent.wait_running("web")
    pod_path = f"kubepods/burstable/pod{uid}"
    return pod_path, f"{pod_path}/main", proc


def same_process(agent: AgentProcess, path: str, proc: tuple[int, int]) -> None:
    pod = agent.pod("web")
    assert running_pid(pod) == proc, pod
    assert container_status(pod)["restartCount"] == 0  # type: ignore[arg-type]
    assert proc[0] in agent.cg.pids(path)


def test_a_running_pod_is_resized_in_place(agent: AgentProcess) -> None:
    cg = agent.cg
    pod_path, path, proc = start_pod(agent)
    expect_memory(cg, path, 64 * MI)
    expect_cpu(cg, path, milli_cpu_to_shares(100), 20000)

    status, body = resize(agent, "web", {"cpu": "200m", "memory": "32Mi"}, {"cpu": "500m", "memory": "128Mi"})
    assert status == 200, body
    expect_memory(cg, path, 128 * MI)
    expect_memory(cg, pod_path, 128 * MI)
    expect_cpu(cg, path, milli_cpu_to_shares(200), 50000)
    expect_cpu(cg, pod_path, milli_cpu_to_shares(200), 50000)
    same_process(agent, path, proc)
    cs = container_status(body)
    assert cs["allocatedResources"] == {"cpu": "200m", "memory": "32Mi"}
    assert cs["resources"]["limits"] == {"cpu": "500m", "memory": "128Mi"}
    assert not [c for c in body["status"].get("conditions", []) if c["type"].startswith("PodResize")]

    # lowered: the sleeping process uses far less than 48Mi, so the decrease is applied at once
    status, body = resize(agent, "web", limits={"cpu": "300m", "memory": "48Mi"})
    assert status == 200, body
    expect_memory(cg, path, 48 * MI)
    expect_memory(cg, pod_path, 48 * MI)
    expect_cpu(cg, path, milli_cpu_to_shares(200), 30000)
    same_process(agent, path, proc)

    # the 200 is on disk: a SIGKILLed agent comes back with the resize, the cgroups and the process as they were
    status, body = resize(agent, "web", limits={"cpu": "400m", "memory": "96Mi"})
    assert status == 200, body
    agent.crash()
    agent.start()
    poll_until(lambda: running_pid(agent.pod("web")) == proc, 20, "the pod to be re-adopted")
    # the allocation came back from the journal; the restarted agent applies it again (its retry,
    # at once after restore: in CI's loaded guest the first status read came before it)
    poll_until(lambda: container_status(agent.pod("web"))["resources"]["limits"]  # type: ignore[arg-type]
               == {"cpu": "400m", "memory": "96Mi"}, 20, "the resize to be applied again")
    assert container_status(agent.pod("web"))["allocatedResources"] == {"cpu": "200m", "memory": "32Mi"}  # type: ignore[arg-type]
    assert agent.pod("web")["spec"]["containers"][0]["resources"]["limits"]["memory"] == "96Mi"  # type: ignore[index]
    expect_memory(cg, path, 96 * MI)
    expect_cpu(cg, path, milli_cpu_to_shares(200), 40000)
    same_process(agent, path, proc)


def test_beyond_allocatable_is_infeasible_and_a_qos_change_invalid(agent: AgentProcess) -> None:
    cg = agent.cg
    pod_path, path, proc = start_pod(agent)
    status, body = resize(agent, "web", {"cpu": "1000", "memory": "32Mi"}, {"cpu": "1000", "memory": "64Mi"})
    assert status == 200, body  # the spec is taken; the node says it cannot be done
    pending = [c for c in body["status"]["conditions"] if c["type"] == "PodResizePending"]
    assert len(pending) == 1 and pending[0]["reason"] == "Infeasible", body["status"]
    assert pending[0]["message"].startswith("Node didn't have enough capacity: cpu, requested: 1000000, capacity: ")
    assert body["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1k"
    assert container_status(body)["allocatedResources"]["cpu"] == "100m"
    expect_cpu(cg, path, milli_cpu_to_shares(100), 20000)
    expect_memory(cg, path, 64 * MI)
    same_process(agent, path, proc)

    status, body = resize(agent, "web", {"cpu": "200m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"})
    assert status == 422 and body["reason"] == "Invalid", body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec"]
    status, body = resize(agent, "web", {"cpu": "100m", "memory": "32Mi", "ephemeral-storage": "1Gi"})
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.containers[0].resources.requests[ephemeral-storage]"]
    status, body = resize(agent, "web", limits={"cpu": "300m"}, content_type="application/json")
    assert status == 415, body
    assert agent.request("PATCH", "/api/v1/namespaces/default/pods/web/resize", b"{}", content_type=STRATEGIC,
                         auth=False)[0] == 401  # a write: credentials needed


def test_a_memory_limit_is_not_lowered_below_usage(agent: AgentProcess) -> None:
    """v1 would refuse the write (EBUSY), v2 would OOM-kill: the decrease is held back
    (PodResizeInProgress, reason Error), the process goes on; a limit above the usage is applied."""
    cg = agent.cg
    uid = str(uuid.uuid4())
    hold = f"import time; b = b'x' * (60 << 20); open('{agent.workdir}/ready', 'w').close(); time.sleep(600)"
    agent.create_ok(pod_manifest("web", [sys.executable, "-c", hold], uid=uid,
                                 requests={"cpu": "100m", "memory": "32Mi"}, limits={"cpu": "200m", "memory": "128Mi"}))
    proc = agent.wait_running("web")
    # at 200m CPU the interpreter's start and the 60 MiB take over 20 s in a loaded guest
    poll_until(lambda: (agent.workdir / "ready").exists(), 60, "the pod to hold its memory")
    path = f"kubepods/burstable/pod{uid}/main"
    status, body = resize(agent, "web", limits={"cpu": "200m", "memory": "32Mi"})
    assert status == 200, body
    held = [c for c in body["status"]["conditions"] if c["type"] == "PodResizeInProgress"]
    assert len(held) == 1 and held[0]["reason"] == "Error", body["status"]
    assert "is above the desired memory limit 33554432" in held[0]["message"]
    assert container_status(body)["resources"]["limits"]["memory"] == "128Mi"
    expect_memory(cg, path, 128 * MI)
    same_process(agent, path, proc)
    status, body = resize(agent, "web", limits={"cpu": "200m", "memory": "96Mi"})
    assert status == 200, body
    assert not [c for c in body["status"].get("conditions", []) if c["type"].startswith("PodResize")], body["status"]
    expect_memory(cg, path, 96 * MI)
    same_process(agent, path, proc)
