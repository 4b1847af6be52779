"""In-place resize through the control plane (KEP-1287) on a real kernel: a pod the server bound
to a real agent is resized with `kubectl patch --subresource resize`; the agent, watching its
pods, applies it to the running process's cgroups (memory.limit_in_bytes / cpu.cfs_quota_us on
v1, memory.max / cpu.max on v2) without restarting it, and reports allocatedResources,
resources and observedGeneration through pods/status; a resize beyond the node's allocatable is
PodResizePending reason Infeasible and leaves the cgroups alone; one that fits only once another
pod is gone is Deferred, then applied when that pod is deleted; a resizePolicy changed to
RestartContainer through the subresource restarts the container with its new memory limit.

Host (cgroup v1):    .venv/bin/pytest integration/test_agent_controlplane_resize.py -q
UML guest (pure v2): integration/run-in-uml.sh .venv/bin/pytest integration/test_agent_controlplane_resize.py -q
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, container_status, poll_until, running_pid
from kernel_view import CgroupFiles, cpu_is, expect_cpu, expect_memory, page_floor
from secure_cluster import MARKS, SecureServer

from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import milli_cpu_to_shares

pytestmark = MARKS
MI = 1 << 20
TRAP = "trap 'exit 0' TERM; while :; do sleep 0.1; done"


def memory_is(cg: CgroupFiles, path: str, limit: int) -> bool:
    name = "memory.max" if cg.version == 2 else "memory.limit_in_bytes"
    return cg.read(path, "memory", name) == str(page_floor(limit))


def resize(server: SecureServer, resources: dict[str, Any], check: bool = True) -> Any:
    patch = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    return server.kubectl("patch", "pod", "rz", "--subresource", "resize", "--patch", json.dumps(patch), check=check)


def test_a_server_pod_is_resized_in_place_by_its_agent(server: SecureServer,
                                                       make_agent: Callable[..., AgentProcess]) -> None:
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"})
    cg = agent.cg
    try:
        poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 30,
                   "the node to be Ready")
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rz", "namespace": "default"},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                    "name": "main", "command": ["/bin/sh", "-c", TRAP],
                    "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                     {"resourceName": "memory", "restartPolicy": "NotRequired"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                  "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}
        (server.tmp / "rz.json").write_text(json.dumps(body))
        server.kubectl("apply", "-f", str(server.tmp / "rz.json"))
        server.kubectl("wait", "--for=condition=Ready", "pod/rz", "--timeout=60s", timeout=70)
        uid = server.get_json("pod", "rz")["metadata"]["uid"]
        path = f"kubepods/burstable/pod{uid}/main"
        proc = poll_until(lambda: running_pid(agent.pod("rz")), 10, "rz's process")
        expect_memory(cg, path, 64 * MI)
        expect_cpu(cg, path, milli_cpu_to_shares(100), 20000)

        resize(server, {"requests": {"cpu": "200m"}, "limits": {"cpu": "500m", "memory": "128Mi"}})
        assert server.get_json("pod", "rz")["metadata"]["generation"] == 2
        poll_until(lambda: memory_is(cg, path, 128 * MI) and cpu_is(cg, path, milli_cpu_to_shares(200), 50000),
                   20, "the container cgroup to take the new limits")
        assert running_pid(agent.pod("rz")) == proc and proc[0] in cg.pids(path)

        def reported() -> dict[str, Any] | None:
            pod = server.get_json("pod", "rz")
            status = pod["status"]
            cs = status["containerStatuses"][0]
            resize_conditions = [c for c in status.get("conditions", []) if c["type"].startswith("PodResize")]
            done = (status.get("observedGeneration") == 2 and not resize_conditions
                    and cs.get("allocatedResources") == {"cpu": "200m", "memory": "32Mi"}
                    and cs.get("resources", {}).get("limits") == {"cpu": "500m", "memory": "128Mi"})
            return pod if done else None

        pod = poll_until(reported, 20, "the status to report the resize")
        assert container_status(pod)["restartCount"] == 0
        print("resized in place: pid", proc[0], "status", json.dumps(container_status(pod)["resources"]))

        # room taken by another pod: Deferred until it goes, then applied
        alloc = parse_quantity(server.get_json("node", NODE_NAME)["status"]["allocatable"]["cpu"]).milli_value()
        hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "default"},
               "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                   "name": "main", "command": ["/bin/sh", "-c", TRAP],
                   "resources": {"requests": {"cpu": f"{alloc - 300}m"}}}]}}
        (server.tmp / "hog.json").write_text(json.dumps(hog))
        server.kubectl("apply", "-f", str(server.tmp / "hog.json"))
        server.kubectl("wait", "--for=condition=Ready", "pod/hog", "--timeout=60s", timeout=70)
        resize(server, {"requests": {"cpu": "400m"}})

        def deferred() -> dict[str, Any] | None:
            status = server.get_json("pod", "rz")["status"]
            pending = [c for c in status.get("conditions", []) if c["type"] == "PodResizePending"]
            ok = status.get("observedGeneration") == 3 and pending and pending[0].get("reason") == "Deferred"
            return pending[0] if ok else None

        cond = poll_until(deferred, 20, "PodResizePending Deferred")
        assert "Node didn't have enough resource: cpu" in cond["message"], cond
        assert cpu_is(cg, path, milli_cpu_to_shares(200), 50000)
        server.kubectl("delete", "pod", "hog", "--timeout=60s", timeout=70)
        poll_until(lambda: cpu_is(cg, path, milli_cpu_to_shares(400), 50000), 20, "the deferred resize to apply")
        poll_until(lambda: not [c for c in server.get_json("pod", "rz")["status"].get("conditions", [])
                                if c["type"].startswith("PodResize")], 20, "the resize conditions to clear")
        assert running_pid(agent.pod("rz")) == proc

        # resizePolicy changed through the subresource: memory now RestartContainer, so the
        # container is restarted with its new limit
        patch = {"spec": {"containers": [{"name": "main", "resources": {"limits": {"memory": "96Mi"}},
                                          "resizePolicy": [{"resourceName": "memory",
                                                            "restartPolicy": "RestartContainer"}]}]}}
        server.kubectl("patch", "pod", "rz", "--subresource", "resize", "--patch", json.dumps(patch))

        def restarted() -> tuple[int, int] | None:
            now = running_pid(agent.pod("rz"))
            cs = server.get_json("pod", "rz")["status"]["containerStatuses"][0]
            return now if now and now != proc and cs["restartCount"] == 1 and cs["ready"] else None

        proc = poll_until(restarted, 30, "the container to be restarted (RestartContainer)")
        assert memory_is(cg, path, 96 * MI) and proc[0] in cg.pids(path)

        # beyond the node's allocatable: Infeasible, the cgroups keep what they have
        resize(server, {"requests": {"memory": "100Ti"}, "limits": {"memory": "100Ti"}})

        def infeasible() -> dict[str, Any] | None:
            status = server.get_json("pod", "rz")["status"]
            pending = [c for c in status.get("conditions", []) if c["type"] == "PodResizePending"]
            ok = status.get("observedGeneration") == 5 and pending and pending[0].get("reason") == "Infeasible"
            return pending[0] if ok else None

        cond = poll_until(infeasible, 20, "PodResizePending Infeasible")
        assert cond.get("observedGeneration") == 5 and "Node didn't have enough capacity: memory" in cond["message"]
        assert memory_is(cg, path, 96 * MI) and running_pid(agent.pod("rz")) == proc

        # a QoS class change never reaches the agent
        bad = resize(server, {"requests": {"cpu": "500m"}}, check=False)  # requests == limits: Guaranteed
        assert "Pod QOS Class may not change as a result of resizing" in bad.stderr, bad.stderr
    finally:
        server.kubectl("delete", "pods", "--all", "--timeout=60s", check=False, timeout=70)
