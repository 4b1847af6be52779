"""A real agent process joins a real `nodeagent server run` (security on) as a kubelet does, seen
through the real kubectl: its Node is Ready with the allocatable the agent computes, its Lease in
kube-node-lease is renewed, a restarted server is reconnected to, and once the agent is SIGKILLed
the Lease is renewed no more (what a node lifecycle controller will read as a lost node).

The agent authenticates with the client certificate `nodeagent server kubeconfig --user
system:node:it-node --group system:nodes` gives it (the Node authorizer's identity).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent_harness import NODE_NAME, AgentProcess, poll_until
from secure_cluster import MARKS, SecureServer

pytestmark = MARKS
LEASE_S = 4  # renewed every second


def renew_time(server: SecureServer) -> str | None:
    lease = server.get_json("lease", NODE_NAME, "-n", "kube-node-lease")
    return (lease or {}).get("spec", {}).get("renewTime")


def renewed_after(server: SecureServer, stamp: str | None) -> str | None:
    now = renew_time(server)
    return now if now and (stamp is None or now > stamp) else None


def node_row(server: SecureServer) -> list[str]:
    lines = server.kubectl("get", "nodes", "--no-headers", check=False).stdout.splitlines()
    return next((line.split() for line in lines if line.split()[:1] == [NODE_NAME]), [])


def test_agent_registers_renews_its_lease_and_survives_a_server_restart(
        server: SecureServer, make_agent: Callable[..., AgentProcess]) -> None:
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeLeaseDurationSeconds": LEASE_S, "nodeStatusUpdateFrequency": "1s"})
    row = poll_until(lambda: node_row(server)[:2] == [NODE_NAME, "Ready"] and node_row(server), 30,
                     "kubectl get nodes to show the node Ready")
    assert row[:2] == [NODE_NAME, "Ready"]
    node: dict[str, Any] = server.get_json("node", NODE_NAME)
    own = agent.node()  # the agent's own API
    for resource in ("cpu", "memory", "pods"):
        assert node["status"]["allocatable"][resource] == own["status"]["allocatable"][resource], resource
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == agent.port
    assert node["metadata"]["annotations"]["nodeagent.io/api-url"] == f"http://127.0.0.1:{agent.port}"
    print("kubectl get nodes:", " ".join(row), "allocatable:", node["status"]["allocatable"])

    first = poll_until(lambda: renew_time(server), 10, "the node lease")
    second = poll_until(lambda: renewed_after(server, first), 2 * LEASE_S, "renewTime to advance")
    leases = server.kubectl("get", "lease", "-n", "kube-node-lease").stdout
    assert NODE_NAME in leases
    print("renewTime", first, "->", second)

    server.stop()
    poll_until(lambda: "control_plane_lost" in agent.log_path.read_text(), 15, "the agent to notice")
    assert agent.alive  # the agent's own loop goes on
    server.start()
    poll_until(lambda: agent.log_path.read_text().count("control_plane_connected") >= 2, 30,
               "the agent to reconnect after the restart")
    after_restart = poll_until(lambda: renewed_after(server, second), 3 * LEASE_S, "renewals after the restart")
    print("after the server restart, renewTime", after_restart)

    agent.crash()  # SIGKILL: nothing runs on the way out
    last = poll_until(lambda: renew_time(server), 5, "the lease")
    time.sleep(LEASE_S)  # a whole lease duration: four renewals were due
    assert renew_time(server) == last, "the lease was renewed after the agent was killed"
    print("after SIGKILL, renewTime stays", last)
