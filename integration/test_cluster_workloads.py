"""A Deployment on three real agents under a real `nodeagent server run`, driven by the real kubectl:
its 6 pods spread 2 per node and become Ready through the agents' readiness probes; a rolling
update (maxUnavailable 1) is watched with the official client while it happens and never has fewer
than replicas - 1 Ready pods; `kubectl rollout status|history|undo` work; the server SIGKILLed
mid-rollout and restarted converges with each pod's process running exactly once on the agents;
a cascading delete stops every process.

Each agent (integration/agent_harness.py) has its own stateDir, port, node name and cgroup root
`/nodeagent-it-<random>`, and joins with its node's client certificate. The tests run in file order
on one cluster; the fixture stops every process it started and removes the cgroup roots.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, poll_until
from conftest import KERNEL_VERSION
from secure_cluster import MARKS, ROOT, PodWatch, SecureServer, is_ready

pytestmark = MARKS
REPLICAS, NS, NAME, SELECTOR = 6, "default", "web", "app=web"
SCRIPT = "while :; do sleep 1; done"
MAIN = ["/bin/sh", "-c", SCRIPT]


@dataclass
class Cluster:
    server: SecureServer
    agents: list[AgentProcess]

    def kubectl(self, *args: str, timeout: float = 30) -> str:
        return self.server.kubectl(*args, timeout=timeout).stdout

    def items(self, kind: str, selector: str = SELECTOR) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", kind, "-l", selector, "-o", "json"))["items"])

    def core(self) -> Any:
        import kubernetes
        return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(self.server.admin)))

    def processes(self) -> dict[str, list[tuple[str, str]]]:
        """pod uid -> (node, its VERSION variable) of each process running the pod's main command,
        on any agent, read from the agents' cgroups and /proc (not asked of the agents)."""
        out: dict[str, list[tuple[str, str]]] = {}
        for agent in self.agents:
            for uid, pids in agent.pod_processes().items():
                out.setdefault(uid, [])
                for pid in pids:
                    try:
                        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
                        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    except (FileNotFoundError, ProcessLookupError):
                        continue
                    if [a.decode() for a in argv] == MAIN:
                        version = next((e[len(b"VERSION="):].decode() for e in environ if e.startswith(b"VERSION=")), "")
                        out[uid].append((agent.node_name, version))
        return out


def deployment(version: str) -> dict[str, Any]:
    """6 light host-process pods (10m CPU, 8Mi), Ready once an exec probe passes. A Deployment's
    template needs an image (as upstream); the host-process annotation has the agent run the
    command on the host instead."""
    container = {"name": "main", "image": "busybox", "command": MAIN, "env": [{"name": "VERSION", "value": version}],
                 "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
                 "readinessProbe": {"exec": {"command": ["/bin/true"]}, "periodSeconds": 5}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": NS},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": NAME}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": NAME},
                                               "annotations": {"nodeagent.io/host-process": "true"}},
                                  "spec": {"containers": [container], "terminationGracePeriodSeconds": 2}}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("workloads")
    (tmp / "server").mkdir()
    agents: list[AgentProcess] = []
    server = SecureServer(tmp / "server", cwd=ROOT)
    try:
        tag = secrets.token_hex(2)
        for i in range(3):
            workdir = tmp / f"agent{i}"
            workdir.mkdir()
            node = f"wl-{tag}-{i}"
            assert KERNEL_VERSION is not None
            agent = AgentProcess(workdir, KERNEL_VERSION, node_name=node, extra_config={
                "kubeconfig": str(server.node_kubeconfig(node)), "nodeLeaseDurationSeconds": 10,
                "nodeStatusUpdateFrequency": "2s"})
            agents.append(agent)
            agent.start()
        c = Cluster(server, agents)

        def ready_nodes() -> bool:
            nodes = json.loads(c.kubectl("get", "nodes", "-o", "json"))["items"]
            return sum(any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions", []))
                       for n in nodes) == 3

        poll_until(ready_nodes, 60, "3 Ready nodes", interval=0.3)
        yield c
    finally:
        try:
            server.kubectl("delete", "deployments", "--all", "--wait=false", check=False)
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        server.stop()
        errors = []
        for agent in agents:
            try:
                agent.cleanup()  # deletes its pods, stops it, kills and removes its cgroup root
            except AssertionError as e:
                errors.append(str(e))
        assert not errors, "\n".join(errors)


def rollout_done(c: Cluster) -> bool:
    """Every replica updated and available, and the last spec seen (what `rollout status` checks)."""
    d = json.loads(c.kubectl("get", "deploy", NAME, "-o", "json"))
    st = d.get("status") or {}
    return bool(st.get("observedGeneration") == d["metadata"]["generation"]
                and st.get("updatedReplicas") == st.get("replicas") == st.get("availableReplicas") == REPLICAS)


def env_version(obj: dict[str, Any]) -> str:
    spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    return str(spec["containers"][0]["env"][0]["value"])


def converged(c: Cluster) -> list[dict[str, Any]] | None:
    """The Deployment's pods once exactly REPLICAS exist, all Ready on their nodes, none terminating,
    each with exactly one process of its main command (with its template's environment) on its own
    node, and no process or cgroup of any other pod on the agents."""
    pods = c.items("pods")
    if len(pods) != REPLICAS or not all(is_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods):
        return None
    want = {p["metadata"]["uid"]: [(p["spec"]["nodeName"], env_version(p))] for p in pods}
    return pods if c.processes() == want else None


def test_six_replicas_spread_two_per_node_and_become_ready(cluster: Cluster) -> None:
    path = cluster.server.tmp / "deploy.json"
    path.write_text(json.dumps(deployment("1")))
    assert cluster.kubectl("apply", "-f", str(path)).strip() == "deployment.apps/web created"
    cluster.kubectl("rollout", "status", f"deploy/{NAME}", "--timeout=60s", timeout=70)
    pods = poll_until(lambda: converged(cluster), 30, "6 Ready pods, each running once", interval=0.3)
    per_node: dict[str, int] = {}
    for p in pods:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    print("pods per node:", per_node)
    assert per_node == {a.node_name: 2 for a in cluster.agents}, per_node
    assert {env_version(p) for p in pods} == {"1"}


def test_rolling_update_keeps_replicas_minus_max_unavailable_ready_and_undo_returns(cluster: Cluster) -> None:
    watch = PodWatch(cluster.core(), NS, SELECTOR)
    assert watch.min_ready == REPLICAS
    try:
        out = cluster.kubectl("set", "env", f"deploy/{NAME}", "VERSION=2")
        assert out.strip() == "deployment.apps/web env updated"
        out = cluster.kubectl("rollout", "status", f"deploy/{NAME}", "--timeout=60s", timeout=70)
        assert 'deployment "web" successfully rolled out' in out, out
        pods = poll_until(lambda: converged(cluster), 30, "6 new pods, each running once", interval=0.3)
        assert watch.thread.is_alive()  # the watch followed the whole rollout
    finally:
        watch.stop()
    print(f"rolling update: {watch.events} pod events, min Ready {watch.min_ready}, max pods {watch.max_pods}")
    assert {env_version(p) for p in pods} == {"2"}
    assert watch.events >= 2 * REPLICAS, watch.events  # the rollout was seen, pod by pod
    assert watch.min_ready is not None and watch.min_ready >= REPLICAS - 1, watch.min_ready
    assert watch.max_pods <= REPLICAS + 1, watch.max_pods
    history = cluster.kubectl("rollout", "history", f"deploy/{NAME}")
    assert [line.split()[0] for line in history.strip().splitlines()[2:]] == ["1", "2"], history

    first = next(r for r in cluster.items("rs") if env_version(r) == "1")
    cluster.kubectl("rollout", "undo", f"deploy/{NAME}")
    cluster.kubectl("rollout", "status", f"deploy/{NAME}", "--timeout=60s", timeout=70)
    pods = poll_until(lambda: converged(cluster), 30, "the first template's pods back", interval=0.3)
    assert {env_version(p) for p in pods} == {"1"}
    assert {p["metadata"]["labels"]["pod-template-hash"] for p in pods} == {
        first["metadata"]["labels"]["pod-template-hash"]}
    d = json.loads(cluster.kubectl("get", "deploy", NAME, "-o", "json"))
    assert env_version(d) == "1" and d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"


def test_server_killed_mid_rollout_converges_with_each_pod_running_once(cluster: Cluster) -> None:
    cluster.kubectl("set", "env", f"deploy/{NAME}", "VERSION=3")
    def mid_rollout() -> list[dict[str, Any]] | None:  # the old ReplicaSet scaled down once at least
        pods = cluster.items("pods")
        return pods if sum(env_version(p) == "3" for p in pods) >= 2 else None

    pods = poll_until(mid_rollout, 30, "the rollout to be under way", interval=0.1)
    server = cluster.server
    assert server.proc is not None
    server.proc.kill()  # SIGKILL: the controllers stop mid-step
    server.proc.wait(10)
    at_kill = sorted(env_version(p) for p in pods)
    assert "1" in at_kill, f"the rollout was over before the kill: {at_kill}"
    server.start()
    watch = PodWatch(cluster.core(), NS, SELECTOR)
    try:
        poll_until(lambda: rollout_done(cluster), 60, "the rollout to finish after the restart", interval=0.3)
        pods = poll_until(lambda: converged(cluster), 30, "6 pods, each running once", interval=0.3)
        assert watch.thread.is_alive()
    finally:
        watch.stop()
    print(f"killed with pod versions {at_kill}; after the restart: {watch.events} pod events, "
          f"min Ready {watch.min_ready}, max pods {watch.max_pods}")
    assert {env_version(p) for p in pods} == {"3"}
    assert watch.max_pods <= REPLICAS + 1, watch.max_pods
    assert watch.min_ready is not None and watch.min_ready >= REPLICAS - 1, watch.min_ready
    rss = cluster.items("rs")
    assert sorted(r["spec"]["replicas"] for r in rss) == [0, 0, REPLICAS], [r["metadata"]["name"] for r in rss]


def test_cascading_delete_stops_every_process(cluster: Cluster) -> None:
    cluster.kubectl("delete", "deploy", NAME, "--timeout=30s", timeout=40)

    def gone() -> bool:
        return not cluster.items("rs") and not cluster.items("pods") and not any(
            a.pod_processes() for a in cluster.agents)

    poll_until(gone, 30, "the ReplicaSets, pods, pod cgroups and processes gone", interval=0.3)
    assert not any(a.pod_cgroups() for a in cluster.agents)
