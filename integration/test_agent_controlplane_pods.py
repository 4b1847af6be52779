"""A real agent process runs the pods a real `nodeagent server run` binds to it, seen through the
real kubectl: `kubectl apply` of a pod (bound by the server's scheduler) runs it in the agent's
pod cgroup, `kubectl get pods -o wide` shows it Running on the node with its IP, `kubectl wait
--for=condition=Ready` returns, an agent restart adopts it without starting it again, a pod
deleted while the agent is down is stopped and confirmed when it comes back, and `kubectl delete`
returns once the agent has stopped the process (its TERM trap's second waited for).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, poll_until, running_pid
from secure_cluster import MARKS, SecureServer

pytestmark = MARKS
TRAP = "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done"


def apply(server: SecureServer, name: str, script: str, *, memory: str | None = None) -> None:
    container: dict[str, Any] = {"name": "main", "command": ["/bin/sh", "-c", script]}
    if memory:
        container["resources"] = {"requests": {"memory": memory, "cpu": "100m"},
                                  "limits": {"memory": memory, "cpu": "100m"}}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 10}}
    path = server.tmp / f"{name}.json"
    path.write_text(json.dumps(body))
    server.kubectl("apply", "-f", str(path))


def alive(pid: int) -> bool:
    """Running (a zombie whose parent, after the agent restarted, is a non-reaping init is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_server_pods_run_on_the_real_agent(server: SecureServer, make_agent: Callable[..., AgentProcess]) -> None:
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": 4, "nodeStatusUpdateFrequency": "1s"})
    try:
        poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 30,
                   "the node to be Ready")
        apply(server, "web", TRAP, memory="64Mi")
        server.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=60s", timeout=70)
        row = server.kubectl("get", "pods", "-o", "wide", "--no-headers").stdout.split()
        assert row[0] == "web" and row[1] == "1/1" and row[2] == "Running" and row[6] == NODE_NAME, row
        pod = server.get_json("pod", "web")
        assert pod["status"]["podIP"] == row[5] and pod["status"]["qosClass"] == "Guaranteed", pod["status"]
        pid, _ = poll_until(lambda: running_pid(agent.pod("web")), 10, "web's process")
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        assert agent.cgroup_root in cgroup and pod["metadata"]["uid"].replace("-", "_") in cgroup.replace("-", "_"), \
            cgroup
        print("kubectl get pods -o wide:", " ".join(row), "pid", pid)

        # the agent restarts; meanwhile a pod is deleted on the server (it waits Terminating)
        apply(server, "doomed", TRAP)
        server.kubectl("wait", "--for=condition=Ready", "pod/doomed", "--timeout=60s", timeout=70)
        doomed, _ = poll_until(lambda: running_pid(agent.pod("doomed")), 10, "doomed's process")
        agent.stop()
        server.kubectl("delete", "pod", "doomed", "--wait=false")
        assert alive(pid) and alive(doomed)
        agent.start()
        poll_until(lambda: server.get_json("pod", "doomed") is None, 30, "doomed to be confirmed")
        assert not alive(doomed)
        assert running_pid(agent.pod("web")) is not None and running_pid(agent.pod("web"))[0] == pid  # type: ignore[index]
        assert server.get_json("pod", "web")["status"]["containerStatuses"][0]["restartCount"] == 0

        started = time.monotonic()
        server.kubectl("delete", "pod", "web", "--timeout=60s", timeout=70)
        took = time.monotonic() - started
        assert not alive(pid) and took >= 0.9, took
        assert agent.pod("web") is None
        print(f"kubectl delete pod web returned after {took:.2f}s with the process gone")
    finally:
        server.kubectl("delete", "pods", "--all", "--timeout=60s", check=False, timeout=70)
