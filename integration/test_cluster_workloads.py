"""A Deployment on three real agents under a real `nodeagent server run`, driven by the real kubectl:
its 6 pods spread 2 per node and become Ready through the agents' readiness probes; a rolling
update (maxUnavailable 1) is watched with the official client while it happens and never has fewer
than replicas - 1 Ready pods; `kubectl rollout status|history|undo` work; the server SIGKILLed
mid-rollout and restarted converges with each pod's process running exactly once on the agents;
a cascading delete stops every process.

Then, on the same cluster (short `nodeLifecycle` periods in the server config): an agent SIGKILLed
has its node go Ready=Unknown with the unreachable NoExecute taint, its pod (tolerating that 3 s)
evicted and replaced Ready on another node within tolerationSeconds + a few seconds, and once the
agent is back the stale pod is stopped and every pod runs exactly once; `kubectl drain
--ignore-daemonsets` is held by a PodDisruptionBudget until a replacement is Ready (the budget's
minimum of Ready pods watched throughout); a DaemonSet puts a pod on each agent and on a 4th one
that joins; a Job whose pod exits 1 reaches its backoffLimit, a Job completes, a CronJob fires
(its last schedule moved back, as in tests/test_kube_jobs.py) and its pod completes on an agent;
deleting the DaemonSet, the Jobs and the CronJob stops every process.

Each agent (integration/agent_harness.py) has its own stateDir, port, node name and cgroup root
`/nodeagent-it-<random>`, and joins with its node's client certificate. The tests run in file order
on one cluster; the fixture stops every process it started and removes the cgroup roots.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
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


# short node lifecycle periods (kube-controller-manager's flags) so an agent's death is seen in seconds
GRACE_S = 6
LIFECYCLE = f"nodeLifecycle: {{nodeMonitorGracePeriod: {GRACE_S}s, nodeStartupGracePeriod: 20s, nodeMonitorPeriod: 1s}}\n"


def make_agent(server: SecureServer, workdir: Path, node: str) -> AgentProcess:
    """An agent (not started) joining with its node's client certificate; it renews its Lease every second."""
    workdir.mkdir()
    assert KERNEL_VERSION is not None
    return AgentProcess(workdir, KERNEL_VERSION, node_name=node, extra_config={
        "kubeconfig": str(server.node_kubeconfig(node)), "nodeLeaseDurationSeconds": 4,
        "nodeStatusUpdateFrequency": "2s"})


@dataclass
class Cluster:
    server: SecureServer
    agents: list[AgentProcess]
    tmp: Path
    tag: str

    def kubectl(self, *args: str, timeout: float = 30) -> str:
        return self.server.kubectl(*args, timeout=timeout).stdout

    def items(self, kind: str, selector: str = SELECTOR) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", kind, "-l", selector, "-o", "json"))["items"])

    def core(self) -> Any:
        import kubernetes
        return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(self.server.admin)))

    def all_pods(self) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "pods", "-o", "json"))["items"])

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


def template(name: str, version: str, *, probe_period: int = 5, command: list[str] = MAIN,
             restart: str = "Always") -> dict[str, Any]:
    """Light host-process pods (10m CPU, 8Mi), Ready once an exec probe passes. A workload's
    template needs an image (as upstream); the host-process annotation has the agent run the
    command on the host instead."""
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": command,
                                 "env": [{"name": "VERSION", "value": version}],
                                 "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}
    if restart == "Always":
        # timeoutSeconds 5, not the default 1: in the loaded 1-CPU guest an exec of /bin/true can take
        # over a second, and a Ready pod that turns NotReady for a probe period is an availability
        # loss the controllers did not cause (the rollout tests count Ready pods)
        container["readinessProbe"] = {"exec": {"command": ["/bin/true"]}, "periodSeconds": probe_period,
                                       "timeoutSeconds": 5}
    return {"metadata": {"labels": {"app": name}, "annotations": {"nodeagent.io/host-process": "true"}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 2, "restartPolicy": restart}}


def deployment(version: str, name: str = NAME, replicas: int = REPLICAS, probe_period: int = 5) -> dict[str, Any]:
    """6 pods by default, rolled one at a time."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
                     "template": template(name, version, probe_period=probe_period)}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("workloads")
    (tmp / "server").mkdir()
    agents: list[AgentProcess] = []
    server = SecureServer(tmp / "server", cwd=ROOT, extra_config=LIFECYCLE)
    try:
        tag = secrets.token_hex(2)
        for i in range(3):
            agents.append(make_agent(server, tmp / f"agent{i}", f"wl-{tag}-{i}"))
            agents[-1].start()
        c = Cluster(server, agents, tmp, tag)

        def ready_nodes() -> bool:
            nodes = json.loads(c.kubectl("get", "nodes", "-o", "json"))["items"]
            return sum(any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions", []))
                       for n in nodes) == 3

        poll_until(ready_nodes, 60, "3 Ready nodes", interval=0.3)
        yield c
    finally:
        try:
            server.kubectl("delete", "deployments,daemonsets,jobs,cronjobs", "--all", "--wait=false", check=False)
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


# ---- failures, drains, daemons and batch on the same cluster (after the Deployment above is gone) ----

HEAL, HEAL_SEL, HEAL_REPLICAS = "heal", "app=heal", 3
TOLERATION_S = 3  # the heal pods tolerate an unreachable or not-ready node this long (default 300)
SLACK_S = 10  # replacements Ready within tolerationSeconds + this, from the taint's timeAdded
DS, DS_SEL = "daemon", "app=daemon"


def apply(c: Cluster, obj: dict[str, Any]) -> None:
    path = c.tmp / f"{obj['kind']}-{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    c.kubectl("apply", "-f", str(path))


def seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def running_once(c: Cluster) -> list[dict[str, Any]] | None:
    """The cluster's pods that are not being deleted nor finished, once each is Ready and has exactly
    one process of its main command (its template's VERSION) on its own node, and no other pod has
    one on any agent (read from the agents' cgroups and /proc)."""
    pods = [p for p in live(c.all_pods()) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if not all(is_ready(p) for p in pods):
        return None
    want = {p["metadata"]["uid"]: [(p["spec"]["nodeName"], env_version(p))] for p in pods}
    got = {uid: procs for uid, procs in c.processes().items() if procs}
    return pods if got == want else None


def node_state(c: Cluster, name: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(its Ready status, its taints by key:effect)."""
    node = json.loads(c.kubectl("get", "node", name, "-o", "json"))
    ready = next(x["status"] for x in node["status"]["conditions"] if x["type"] == "Ready")
    return ready, {f"{t['key']}:{t['effect']}": t for t in node["spec"].get("taints") or []}


def heal_deployment() -> dict[str, Any]:
    d = deployment(HEAL, name=HEAL, replicas=HEAL_REPLICAS, probe_period=1)
    d["spec"]["template"]["spec"]["tolerations"] = [
        {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": TOLERATION_S} for key in ("unreachable", "not-ready")]
    return d


def test_killed_agent_pods_replaced_within_toleration_and_none_run_twice_after_it_returns(cluster: Cluster) -> None:
    apply(cluster, heal_deployment())
    pods = poll_until(lambda: running_once(cluster), 60, "3 Ready pods, each running once", interval=0.3)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(a.node_name for a in cluster.agents)
    victim = cluster.agents[2]
    (stale,) = [p for p in pods if p["spec"]["nodeName"] == victim.node_name]
    uid = stale["metadata"]["uid"]
    assert victim.pod_processes().get(uid)
    outage = PodWatch(cluster.core(), NS, HEAL_SEL)
    killed = time.time()
    victim.crash()  # SIGKILL of the agent only: its pods' processes stay, as on a partitioned host
    try:
        def unreachable() -> dict[str, Any] | None:
            ready, taints = node_state(cluster, victim.node_name)
            return taints.get("node.kubernetes.io/unreachable:NoExecute") if ready == "Unknown" else None

        taint = poll_until(unreachable, GRACE_S + 20, "Ready=Unknown with the unreachable NoExecute taint", 0.2)
        tainted = time.time()
        added = seconds(taint["timeAdded"])

        def evicted() -> dict[str, Any] | None:
            p = cluster.server.get_json("pod", stale["metadata"]["name"])
            return p if p is None or p["metadata"].get("deletionTimestamp") else None

        gone = poll_until(evicted, TOLERATION_S + 20, "the pod evicted by the taint manager", 0.2)
        assert gone is not None, "deleted at once: nothing ran the pod's graceful deletion"
        target = {x["type"]: x for x in gone["status"]["conditions"]}["DisruptionTarget"]
        assert target["reason"] == "DeletionByTaintManager", target
        assert seconds(target["lastTransitionTime"]) - added >= TOLERATION_S, (target, taint)

        def replaced() -> list[dict[str, Any]] | None:
            heal = live(cluster.items("pods", HEAL_SEL))
            ok = len(heal) == HEAL_REPLICAS and all(is_ready(p) and p["spec"]["nodeName"] != victim.node_name
                                                     for p in heal)
            return heal if ok else None

        poll_until(replaced, TOLERATION_S + 30, "3 Ready pods on the other nodes", 0.2)
        ready = time.time()
        assert outage.thread.is_alive()
        outage.stop()
        # while it happened: one pod lost, one replacement made, never more
        assert (outage.min_ready, outage.max_pods) == (HEAL_REPLICAS - 1, HEAL_REPLICAS), (outage.min_ready,
                                                                                            outage.max_pods)
        # nobody stops the stale pod's process while its agent is down
        assert victim.pod_processes().get(uid), "the stale pod's process went while its agent was down"
        print(f"agent killed: node Unknown+tainted {tainted - killed:.1f}s after the kill (grace {GRACE_S}s); "
              f"evicted {seconds(target['lastTransitionTime']) - added:.0f}s after the taint; replacements Ready "
              f"{ready - added:.1f}s after the taint (tolerationSeconds {TOLERATION_S}), {ready - killed:.1f}s "
              "after the kill")
        assert ready - added <= TOLERATION_S + SLACK_S, ready - added
    finally:
        outage.stop()
        watch = PodWatch(cluster.core(), NS, HEAL_SEL)
        restarted = time.time()
        victim.start()
    try:
        poll_until(lambda: node_state(cluster, victim.node_name) == ("True", {}), 30, "the node Ready, untainted", 0.2)
        pods = poll_until(lambda: running_once(cluster), 30, "the stale pod stopped, each pod running once", 0.2)
        stopped = time.time()
        assert watch.thread.is_alive()
    finally:
        watch.stop()
    assert uid not in {p["metadata"]["uid"] for p in cluster.all_pods()}
    assert not any(uid in a.pod_cgroups() for a in cluster.agents)
    assert len(pods) == HEAL_REPLICAS and victim.node_name not in {p["spec"]["nodeName"] for p in pods}
    print(f"agent restarted: stale pod stopped and each pod running once {stopped - restarted:.1f}s later; "
          f"{watch.events} pod events, min Ready {watch.min_ready}, max pods {watch.max_pods}")
    assert watch.max_pods == HEAL_REPLICAS and watch.min_ready == HEAL_REPLICAS, (watch.max_pods, watch.min_ready)


def daemon_pods(c: Cluster) -> list[dict[str, Any]] | None:
    """The DaemonSet's pods once there is one on each agent's node, every pod running once."""
    pods = running_once(c)
    ds = [p for p in pods or [] if p["metadata"]["labels"].get("app") == DS]
    return ds if pods and sorted(p["spec"]["nodeName"] for p in ds) == sorted(a.node_name for a in c.agents) else None


def test_daemonset_runs_one_pod_per_agent_and_follows_a_joining_node(cluster: Cluster) -> None:
    apply(cluster, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": DS, "namespace": NS},
                    "spec": {"selector": {"matchLabels": {"app": DS}}, "template": template(DS, DS, probe_period=1)}})
    poll_until(lambda: daemon_pods(cluster), 40, "a daemon pod on each of the 3 nodes", interval=0.3)
    joined = make_agent(cluster.server, cluster.tmp / "agent3", f"wl-{cluster.tag}-3")
    cluster.agents.append(joined)
    try:
        started = time.time()
        joined.start()
        pods = poll_until(lambda: daemon_pods(cluster), 40, "a daemon pod on the joining node too", interval=0.2)
        took = time.time() - started
        status = json.loads(cluster.kubectl("get", "ds", DS, "-o", "json"))["status"]
        print(f"4th agent joined: its daemon pod running and Ready {took:.1f}s after the agent started")
        assert len(pods) == 4
    finally:
        cluster.agents.remove(joined)
        if joined.alive:
            joined.stop()  # lets go of its pods; cleanup kills what is left in its cgroup root
        joined.cleanup()
        cluster.kubectl("delete", "node", joined.node_name)
        for p in cluster.all_pods():
            if p["spec"].get("nodeName") == joined.node_name:
                cluster.kubectl("delete", "pod", p["metadata"]["name"], "--grace-period=0", "--force")
    assert status["desiredNumberScheduled"] == status["currentNumberScheduled"] == 4, status
    poll_until(lambda: daemon_pods(cluster), 20, "the daemon pods of the 3 nodes left", interval=0.3)
    poll_until(lambda: json.loads(cluster.kubectl("get", "ds", DS, "-o", "json"))["status"].get("numberReady") == 3,
               20, "the DaemonSet's status back to 3", interval=0.3)


def test_drain_is_held_by_the_budget_until_a_replacement_is_ready(cluster: Cluster) -> None:
    """The killed agent's replacement left one node with two heal pods: drained, the budget
    (minAvailable 2 of 3) lets one eviction through and holds the other until a replacement is Ready."""
    pods = poll_until(lambda: running_once(cluster), 30, "each pod running once", interval=0.3)
    heal = [p for p in pods if p["metadata"]["labels"].get("app") == HEAL]
    per_node: dict[str, list[str]] = {}
    for p in heal:
        per_node.setdefault(p["spec"]["nodeName"], []).append(p["metadata"]["uid"])
    target = max(per_node, key=lambda n: len(per_node[n]))
    assert len(per_node[target]) == 2, per_node
    (daemon,) = [p for p in pods if p["metadata"]["labels"].get("app") == DS and p["spec"]["nodeName"] == target]
    apply(cluster, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": HEAL, "namespace": NS},
                    "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": HEAL}}}})
    poll_until(lambda: (cluster.server.get_json("pdb", HEAL).get("status") or {}).get("disruptionsAllowed") == 1,
               20, "one disruption allowed", interval=0.2)
    watch = PodWatch(cluster.core(), NS, HEAL_SEL)
    try:
        started = time.time()
        res = cluster.server.kubectl("drain", target, "--ignore-daemonsets", "--timeout=60s", timeout=70)
        took = time.time() - started
        assert watch.thread.is_alive()
    finally:
        watch.stop()
    print(f"drain of {target}: {took:.1f}s, {watch.events} pod events, min Ready {watch.min_ready} "
          f"(budget 2), max pods {watch.max_pods}")
    assert f"node/{target} drained" in res.stdout, res.stdout
    assert "Cannot evict pod as it would violate the pod's disruption budget." in res.stderr, res.stderr
    assert f"Warning: ignoring DaemonSet-managed Pods: {NS}/{daemon['metadata']['name']}" in res.stderr, res.stderr
    # every state of the pods the watch showed had the budget's 2 Ready pods not being deleted: the
    # second eviction waited for the first replacement to be Ready
    assert watch.min_ready is not None and watch.min_ready >= 2, watch.min_ready
    pods = poll_until(lambda: running_once(cluster), 30, "each pod running once after the drain", interval=0.3)
    heal = [p for p in pods if p["metadata"]["labels"].get("app") == HEAL]
    assert len(heal) == HEAL_REPLICAS and target not in {p["spec"]["nodeName"] for p in heal}
    assert daemon["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}  # the daemon pod stayed, running
    assert not any(uid in cluster.processes() for uid in per_node[target])
    cluster.kubectl("uncordon", target)


def job(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"template": template(name, name, command=["/bin/sh", "-c", script], restart="Never"), **spec}}


def finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def outcome(pod: dict[str, Any]) -> tuple[str, int]:
    """(phase, exit code) the agent reported for a finished pod."""
    st = pod["status"]
    return st["phase"], st["containerStatuses"][0]["state"]["terminated"]["exitCode"]


def finished_at(pod: dict[str, Any]) -> float:
    return seconds(pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])


def job_done(c: Cluster, name: str, condition: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The Job once it has `condition` and every pod of it has finished on an agent."""
    j = c.server.get_json("job", name)
    conds = {x["type"]: x for x in (j or {}).get("status", {}).get("conditions") or [] if x["status"] == "True"}
    pods = c.items("pods", f"batch.kubernetes.io/job-name={name}")
    if condition not in conds or not pods or not all(finished(p) for p in pods):
        return None
    return j, sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])


def test_jobs_fail_at_backoff_limit_or_complete_and_a_cronjob_fires(cluster: Cluster) -> None:
    nodes = {a.node_name for a in cluster.agents}
    apply(cluster, job("fail", "exit 1", backoffLimit=1))
    apply(cluster, job("done", "echo done"))
    fire = datetime.fromtimestamp(time.time() - 120, UTC).replace(second=0)  # a daily schedule 2 minutes ago
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick", "namespace": NS},
            "spec": {"schedule": f"{fire.minute} {fire.hour} * * *", "timeZone": "Etc/UTC",
                     "jobTemplate": {"spec": {"backoffLimit": 0, "template": template(
                         "tick", "tick", command=["/bin/sh", "-c", "echo tick"], restart="Never")}}}}
    apply(cluster, cron)
    # honest and fast: the last schedule moved 5 minutes back, the controller (with the server's real
    # clock) finds the missed time 2 minutes ago and starts its Job at once instead of tomorrow
    cluster.kubectl("patch", "cronjob", "tick", "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"lastScheduleTime": stamp(time.time() - 300)}}))
    tick = f"tick-{int(fire.timestamp()) // 60}"

    j, pods = poll_until(lambda: job_done(cluster, "done", "Complete"), 40, "the Job complete", interval=0.3)
    assert j["status"]["succeeded"] == 1 and len(pods) == 1
    assert outcome(pods[0]) == ("Succeeded", 0) and pods[0]["spec"]["nodeName"] in nodes

    j, pods = poll_until(lambda: job_done(cluster, tick, "Complete"), 40, "the CronJob's Job complete", interval=0.3)
    assert j["metadata"]["ownerReferences"][0]["name"] == "tick"
    assert j["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == stamp(fire.timestamp())
    assert len(pods) == 1 and outcome(pods[0]) == ("Succeeded", 0), pods
    assert pods[0]["spec"]["nodeName"] in nodes
    st = poll_until(lambda: (s := cluster.server.get_json("cronjob", "tick")["status"]).get("lastSuccessfulTime")
                    and s, 20, "the CronJob's lastSuccessfulTime", interval=0.3)
    assert st["lastScheduleTime"] == stamp(fire.timestamp()) and not st.get("active"), st

    j, pods = poll_until(lambda: job_done(cluster, "fail", "Failed"), 60, "the failing Job failed", interval=0.3)
    failed = {x["type"]: x for x in j["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert j["status"]["failed"] == 2 and len(pods) == 2, j["status"]  # backoffLimit 1: one retry
    assert [outcome(p) for p in pods] == [("Failed", 1), ("Failed", 1)]
    assert all(p["spec"]["nodeName"] in nodes for p in pods)
    retry = seconds(pods[1]["metadata"]["creationTimestamp"]) - finished_at(pods[0])
    print(f"failing Job: the retry created {retry:.0f}s after the first pod failed (back-off 10s)")
    assert retry >= 9, retry


def test_cascading_deletes_of_the_daemonset_jobs_and_cronjob_stop_every_process(cluster: Cluster) -> None:
    before = {p["metadata"]["uid"]: p for p in cluster.all_pods()}
    daemons = {u for u, p in before.items() if p["metadata"]["labels"].get("app") == DS}
    assert len(daemons) == 3 and all(cluster.processes().get(u) for u in daemons)
    cluster.kubectl("delete", "daemonset", DS, "--timeout=30s", timeout=40)

    def stopped(uids: set[str]) -> bool:
        cgroups = {u for a in cluster.agents for u in a.pod_cgroups()}
        return not uids & ({p["metadata"]["uid"] for p in cluster.all_pods()} | cgroups)

    poll_until(lambda: stopped(daemons), 30, "the daemon pods, their cgroups and processes gone", interval=0.3)
    assert not cluster.items("controllerrevisions", DS_SEL)
    batch = {u for u, p in before.items() if "batch.kubernetes.io/job-name" in p["metadata"]["labels"]}
    assert len(batch) == 4, batch  # fail (2), done, the CronJob's
    cluster.kubectl("delete", "jobs", "fail", "done", "--timeout=30s", timeout=40)
    cluster.kubectl("delete", "cronjob", "tick", "--timeout=30s", timeout=40)
    poll_until(lambda: stopped(batch) and not json.loads(cluster.kubectl("get", "jobs", "-o", "json"))["items"],
               30, "the Jobs and their pods gone", interval=0.3)
    cluster.kubectl("delete", "pdb", HEAL)
    cluster.kubectl("delete", "deploy", HEAL, "--timeout=30s", timeout=40)
    poll_until(lambda: not cluster.all_pods() and not any(a.pod_cgroups() for a in cluster.agents), 30,
               "every pod, pod cgroup and process gone", interval=0.3)
