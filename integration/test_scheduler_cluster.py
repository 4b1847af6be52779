"""Three real agents and the real scheduler, as processes on this machine: placement by requests,
an unschedulable pod and its reasons, preemption, a quota, a SIGKILLed scheduler that loses
nothing, and a node under MemoryPressure that gets no BestEffort pods.

Each agent has its own port, stateDir and cgroup root `/nodeagent-sched-<random>-<i>`, and a
systemReserved that leaves a small node (1 CPU, 1 GiB; 256 MiB on a machine under 4 GiB, such as
the User-Mode-Linux guest). One token file is shared by the agents and the scheduler. Memory
pressure is induced by a live config reload of one agent with an evictionHard memory.available
just under the machine's capacity (so always met). The tests run in file order on one cluster.
Everything started is stopped by PID, and every cgroup root created is killed and removed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_harness import ensure_loopback_up, free_port
from conftest import KERNEL_VERSION, NO_VERSION_REASON

from nodeagent.agent.cgroups.detect import make_driver

pytestmark = pytest.mark.skipif(KERNEL_VERSION is None, reason=f"no usable cgroup hierarchy: {NO_VERSION_REASON}")

BIN = Path(sys.executable).with_name("nodeagent")
GI, MI = 1 << 30, 1 << 20
TOKEN = secrets.token_hex(16)


def mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


NODE_MEM = GI if mem_total() >= 4 * GI else 256 * MI
NODE_CPU_M = 1000


def api(method: str, url: str, body: Any = None, *, timeout: float = 10) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while True:
        try:
            value = cond()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    url: str
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_healthy(self, timeout: float = 60) -> None:
        def ok() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited: {self.log.read_text()[-3000:]}")
            return _healthz(self.url)
        wait(ok, timeout, f"{self.name} to serve")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


def _healthz(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class Cluster:
    tmp: Path
    tag: str
    agents: list[Proc] = field(default_factory=list)
    agent_configs: list[dict[str, Any]] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    scheduler: Proc | None = None

    @property
    def s(self) -> str:
        assert self.scheduler is not None
        return self.scheduler.url

    def node(self, i: int) -> str:
        return f"sched-{self.tag}-{i}"

    def write_agent_config(self, i: int) -> Path:
        path = self.tmp / f"agent-{i}.yaml"
        path.write_text(yaml.safe_dump(self.agent_configs[i]))
        return path

    def pods(self, ns: str | None = None) -> dict[str, dict[str, Any]]:
        path = f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods"
        code, data = api("GET", self.s + path)
        assert code == 200, data
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in data["items"]}

    def agent_pods(self, i: int) -> dict[str, dict[str, Any]]:
        code, data = api("GET", self.agents[i].url + "/api/v1/pods")
        assert code == 200, data
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in data["items"]}

    def create(self, manifest: dict[str, Any], ns: str = "default", expect: int = 201) -> dict[str, Any]:
        code, data = api("POST", f"{self.s}/api/v1/namespaces/{ns}/pods", manifest)
        assert code == expect, data
        return data

    def running(self, key: str) -> str | None:
        """The node the pod runs on, per the scheduler and confirmed by that agent."""
        pod = self.pods().get(key)
        node = pod and pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") != "Running":
            return None
        i = int(node.rsplit("-", 1)[1])
        ap = self.agent_pods(i).get(key)
        return node if ap and ap["metadata"]["uid"] == pod["metadata"]["uid"] else None


def pod(name: str, cpu: str | None = None, memory: str | None = None, **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    container: dict[str, Any] = {"name": "main", "command": ["sleep", "3600"]}
    if requests:
        container["resources"] = {"requests": requests}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 2, **spec}}


def capacity(config: Path) -> dict[str, str]:
    out = subprocess.run([str(BIN), "check-config", "--config", str(config)], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)["capacity"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ensure_loopback_up()
    tmp = tmp_path_factory.mktemp("sched")
    token = tmp / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    c = Cluster(tmp, secrets.token_hex(3))
    try:
        ports = [free_port() for _ in range(4)]
        for i in range(3):
            root = f"/nodeagent-sched-{c.tag}-{i}"
            c.roots.append(root)
            cfg: dict[str, Any] = {
                "nodeName": c.node(i), "address": "127.0.0.1", "port": ports[i],
                "stateDir": str(tmp / f"agent-{i}"), "unixSocket": None, "cgroupRoot": root,
                "authentication": {"tokenFile": str(token)}, "kubeReserved": {},
                "evictionHard": {"memory.available": "100Mi"}, "housekeepingInterval": "2s",
                "evictionPressureTransitionPeriod": "5s",
                "schedulerURL": f"http://127.0.0.1:{ports[3]}", "schedulerTokenFile": str(token),
                "nodeStatusUpdateFrequency": "2s"}
            c.agent_configs.append(cfg)
            if i == 0:
                cap = capacity(c.write_agent_config(0))
                cap_mem = int(capacity_bytes(cap["memory"]))
                cap_cpu_m = int(float(cap["cpu"]) * 1000)
                reserved = {"cpu": f"{max(0, cap_cpu_m - NODE_CPU_M)}m",
                            "memory": str(cap_mem - NODE_MEM - 100 * MI)}
            cfg["systemReserved"] = reserved
            agent = Proc(c.node(i), [str(BIN), "run", "--config", str(c.write_agent_config(i))],
                         tmp / f"agent-{i}.log", f"http://127.0.0.1:{ports[i]}")
            c.agents.append(agent)
            agent.start()
        sched_cfg = {
            "address": "127.0.0.1", "port": ports[3], "stateDir": str(tmp / "scheduler"),
            "nodes": [{"name": c.node(i), "url": a.url} for i, a in enumerate(c.agents)],
            "agentTokenFile": str(token), "authentication": {"tokenFile": str(token)},
            "nodePollInterval": "1s", "nodeMonitorGracePeriod": "10s", "podInitialBackoff": "200ms",
            "podMaxBackoff": "1s", "logging": {"format": "json"}}
        (tmp / "scheduler.yaml").write_text(yaml.safe_dump(sched_cfg))
        c.scheduler = Proc("scheduler", [str(BIN), "scheduler", "run", "--config", str(tmp / "scheduler.yaml")],
                           tmp / "scheduler.log", f"http://127.0.0.1:{ports[3]}")
        for a in c.agents:
            a.wait_healthy()
        c.scheduler.start()
        c.scheduler.wait_healthy()
        wait(lambda: all(ready(n) for n in api("GET", c.s + "/api/v1/nodes")[1]["items"]), 20, "3 Ready nodes")
        yield c
    finally:
        teardown(c)


def writers(db: Path) -> list[int]:
    """PIDs of store writer processes (nodeagent.cluster.store.writer) working on `db`."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"nodeagent.cluster.store.writer" in argv and str(db).encode() in argv:
                out.append(int(entry.name))
    return out


def capacity_bytes(text: str) -> int:
    from nodeagent.core.quantity import parse_quantity
    return parse_quantity(text).value()


def ready(node: dict[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in node["status"].get("conditions", []))


def teardown(c: Cluster) -> None:
    """Delete every pod through its agent, stop the processes (by PID), remove the cgroups."""
    if c.scheduler is not None:
        c.scheduler.stop()
    for a in c.agents:
        if not a.alive():
            continue
        try:
            for key in list(api("GET", a.url + "/api/v1/pods", timeout=5)[1]["items"]):
                meta = key["metadata"]
                api("DELETE", f"{a.url}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                              "?gracePeriodSeconds=0", timeout=5)
            wait(lambda a=a: not api("GET", a.url + "/api/v1/pods", timeout=5)[1]["items"], 15, "pods gone")
        except (AssertionError, OSError, KeyError, TypeError):
            pass
        a.stop()
    for root in c.roots:
        try:
            drv = make_driver("auto", root)
        except ValueError:
            continue
        drv.kill("")
        drv.remove("")
        leftovers = [f for f in drv.procs_files("") if os.path.exists(os.path.dirname(f))]
        assert not leftovers, f"cgroup root {root} left behind: {leftovers}"


# ---- the scenario, in order ----


def test_pods_are_placed_by_requests_across_nodes(cluster: Cluster) -> None:
    half = f"{NODE_MEM // 2 // MI}Mi"
    for i in range(3):
        cluster.create(pod(f"web-{i}", cpu="600m", memory=half))
    nodes = {wait(lambda i=i: cluster.running(f"default/web-{i}"), 20, f"web-{i} running") for i in range(3)}
    assert nodes == {cluster.node(i) for i in range(3)}  # 600m of 1 CPU each: one per node


def test_a_pod_too_big_for_any_node_stays_pending_with_the_reason(cluster: Cluster) -> None:
    cluster.create(pod("huge", cpu="2", memory="64Mi"))

    def reason() -> dict[str, Any] | None:
        conds = cluster.pods()["default/huge"]["status"].get("conditions", [])
        return next((x for x in conds if x["type"] == "PodScheduled" and x["status"] == "False"), None)

    cond = wait(reason, 10, "PodScheduled=False")
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == ("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are "
                               "available: 3 No preemption victims found for incoming pod.")
    time.sleep(1.5)  # a few more attempts: still nowhere
    huge = cluster.pods()["default/huge"]
    assert "nodeName" not in huge["spec"] and huge["status"]["phase"] == "Pending"


def test_a_high_priority_pod_preempts_a_low_priority_one(cluster: Cluster) -> None:
    code, data = api("POST", cluster.s + "/apis/scheduling.k8s.io/v1/priorityclasses",
                     {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "high"}, "value": 1000})
    assert code == 201, data
    cluster.create(pod("vip", cpu="800m", memory="64Mi", priorityClassName="high"))
    node = wait(lambda: cluster.running("default/vip"), 30, "vip running")
    pods = cluster.pods()
    webs = sorted(k for k in pods if k.startswith("default/web-"))
    assert len(webs) == 2, webs  # one victim, and it is gone from the store
    i = int(node.rsplit("-", 1)[1])
    on_node = cluster.agent_pods(i)
    assert not any(k.startswith("default/web-") for k in on_node), on_node.keys()
    assert pods["default/vip"]["spec"]["priority"] == 1000
    assert "nominatedNodeName" not in pods["default/vip"]["status"]


def test_a_quota_rejects_the_pod_beyond_it(cluster: Cluster) -> None:
    code, data = api("POST", cluster.s + "/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert code == 201, data
    code, data = api("POST", cluster.s + "/api/v1/namespaces/team/resourcequotas",
                     {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-quota"},
                      "spec": {"hard": {"pods": "2", "requests.cpu": "1"}}})
    assert code == 201, data
    for name in ("t0", "t1"):
        cluster.create(pod(name, cpu="50m", memory="16Mi"), ns="team")
    refused = cluster.create(pod("t2", cpu="50m", memory="16Mi"), ns="team", expect=403)
    assert refused["reason"] == "Forbidden"
    assert refused["message"] == ('pods "t2" is forbidden: exceeded quota: team-quota, requested: pods=1, '
                                  "used: pods=2, limited: pods=2")
    code, quota = api("GET", cluster.s + "/api/v1/namespaces/team/resourcequotas/team-quota")
    assert quota["status"]["used"] == {"pods": "2", "requests.cpu": "100m"}
    for name in ("t0", "t1"):
        wait(lambda name=name: cluster.running(f"team/{name}"), 20, f"{name} running")


def test_a_killed_scheduler_loses_nothing(cluster: Cluster) -> None:
    def snapshot() -> dict[str, tuple[str, str | None, str]]:
        return {k: (p["metadata"]["uid"], p["spec"].get("nodeName"), p["status"]["phase"])
                for k, p in cluster.pods().items()}

    before = snapshot()
    on_agents = [{k: p["metadata"]["uid"] for k, p in cluster.agent_pods(i).items()} for i in range(3)]
    assert cluster.scheduler is not None
    cluster.scheduler.stop(signal.SIGKILL)
    cluster.scheduler.start()
    cluster.scheduler.wait_healthy()
    time.sleep(2.5)  # two poll rounds: reconcile has run against every agent
    assert snapshot() == before
    # the killed scheduler's store writer saw its stdin close and left; the new one runs alone
    wait(lambda: len(writers(cluster.tmp / "scheduler" / "scheduler.db")) == 1, 10, "one store writer")
    assert [{k: p["metadata"]["uid"] for k, p in cluster.agent_pods(i).items()} for i in range(3)] == on_agents
    code, pcs = api("GET", cluster.s + "/apis/scheduling.k8s.io/v1/priorityclasses/high")
    assert code == 200 and pcs["value"] == 1000
    assert cluster.create(pod("t2", cpu="50m"), ns="team", expect=403)["reason"] == "Forbidden"
    cluster.create(pod("after", cpu="50m", memory="16Mi"))
    wait(lambda: cluster.running("default/after"), 20, "a pod created after the restart running")


def test_a_node_under_memory_pressure_gets_no_best_effort_pods(cluster: Cluster) -> None:
    i, name = 2, cluster.node(2)
    cap = capacity(cluster.write_agent_config(i))
    cap_mem = capacity_bytes(cap["memory"])
    cfg = cluster.agent_configs[i]
    cfg["evictionHard"] = {"memory.available": str(cap_mem - 64 * MI)}  # always met: pressure
    cfg["systemReserved"] = {"cpu": cfg["systemReserved"]["cpu"]}  # allocatable must stay >= 0
    cluster.write_agent_config(i)
    code, result = api("POST", cluster.agents[i].url + "/api/v1/config/reload")
    assert code == 200 and result["ok"], result

    def tainted() -> bool:
        node = api("GET", f"{cluster.s}/api/v1/nodes/{name}")[1]
        return {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"} in node["spec"].get("taints", [])

    wait(tainted, 20, f"{name} to report MemoryPressure")
    for j in range(4):
        cluster.create(pod(f"be-{j}"))
    cluster.create(pod("be-pinned", nodeSelector={"kubernetes.io/hostname": name}))
    placed = {wait(lambda j=j: cluster.running(f"default/be-{j}"), 20, f"be-{j} running") for j in range(4)}
    assert name not in placed
    assert not any(k.startswith("default/be-") for k in cluster.agent_pods(i))

    def pinned() -> str | None:
        conds = cluster.pods()["default/be-pinned"]["status"].get("conditions", [])
        return next((x["message"] for x in conds if x["type"] == "PodScheduled"), None)

    message = wait(pinned, 10, "be-pinned's reason")
    assert "1 node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }" in message, message
