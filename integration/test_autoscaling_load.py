"""Autoscaling under real load on a real agent: a real secure `nodeagent server run` scrapes a real
`nodeagent run` every second, its controllers (Deployment, ReplicaSet, HPA, VPA) act, and the pods
burn real CPU and hold real memory in their cgroups.

The pods run a small Python loop (host processes, CPU limit 200m so utilization is deterministic):
every 100 ms each touches a heartbeat file, counts its live peers, and burns its share of the total
demand the test writes to a file (`<cores> <MiB>`), so the work is spread over the replicas as a
load balancer would spread requests, and holds `<MiB>` of touched memory. The share is burnt in CPU
time (what it owes since the share changed, by its own process_time), not wall time, so a loaded
machine does not make a pod use less than its share.

- HPA on CPU: a load step scales the Deployment up, never down while the load lasts, and back
  down to minReplicas only after the (short) stabilization window, asserted on the timeline of
  replica counts.
- HPA on CPU and VPA (both resources declared, InPlaceOrRecreate) on the same Deployment under
  changing load: the VPA leaves CPU to the HPA (ConfigUnsupported), recommends memory from the real
  working sets and resizes the running pod in place (same PID, new memory.max in its cgroup), and
  the running pods again as their memory grows; replicas follow the CPU, memory requests follow the
  memory, CPU requests never move, and nothing oscillates. (Growing memory costs CPU: on the UML
  guest 32 MiB of page faults is seconds of it, which an HPA on CPU rightly sees; the test grows
  memory while the HPA is at maxReplicas.)

The VPA's recommendation floor and in-bounds lifetime threshold (upstream's
--pod-recommendation-min-memory-mb and --in-recommendation-bounds-eviction-lifetime-threshold) are
set small, so a minute of real usage is enough; the guest has one CPU, so the load is 0.3 cores.

Host (cgroup v1):    .venv/bin/pytest integration/test_autoscaling_load.py -q
UML guest (pure v2): integration/run-in-uml.sh .venv/bin/pytest integration/test_autoscaling_load.py -q
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import NODE_NAME, AgentProcess, poll_until, running_pid
from kernel_view import expect_memory
from secure_cluster import MARKS, SecureServer

from nodeagent.core.quantity import parse_quantity

pytestmark = MARKS
MI = 1 << 20
APP = "load"
WINDOW_S = 6  # the HPA's scale-down stabilization window
UP_WINDOW_S = 5  # and its scale-up one: a CPU burst shorter than this (a start-up, page faults) is not load
SERVER_CONFIG = (
    "metricResolution: 1s\n"
    "horizontalPodAutoscaler: {syncPeriod: 1s, cpuInitializationPeriod: 1s, initialReadinessDelay: 1s}\n"
    "verticalPodAutoscaler: {recommenderInterval: 1s, updaterInterval: 1s, checkpointInterval: 10s, "
    "podRecommendationMinMemoryMb: 16, podRecommendationMinCpuMillicores: 5, "
    "inRecommendationBoundsEvictionLifetimeThreshold: 3s}\n")

BURN = r"""
import os, sys, time
work = sys.argv[1]
alive = os.path.join(work, "alive")
me = os.path.join(alive, str(os.getpid()))
held = bytearray()
share, cpu0, wall0 = -1.0, 0.0, 0.0
while True:
    now = time.time()
    open(me, "w").close()
    peers = 0
    for entry in os.scandir(alive):
        try:
            peers += now - entry.stat().st_mtime < 1.5
        except FileNotFoundError:
            pass
    try:
        cores, mib = (float(x) for x in open(os.path.join(work, "load")).read().split())
    except (OSError, ValueError):
        cores, mib = 0.0, 0.0
    if len(held) < int(mib) << 20:  # grow by 1 MiB a period: page faults are CPU (costly on UML)
        more = bytearray(min(1 << 20, (int(mib) << 20) - len(held)))
        for i in range(0, len(more), 4096):
            more[i] = 1
        held += more
    elif len(held) > int(mib) << 20:
        held = bytearray(held[:int(mib) << 20])
    wanted = min(1.0, cores / max(1, peers))
    if wanted != share:  # CPU time owed since the share was set: exact under contention too
        share, cpu0, wall0 = wanted, time.process_time(), time.monotonic()
    # idle, a beat every 0.5 s: each one's file operations cost CPU the HPA reads as utilization
    # (on the loaded UML guest, 10 beats a second came to 20-60% of the 100m request)
    end = time.monotonic() + (0.1 if share > 0 else 0.5)
    while (t := time.monotonic()) < end:
        owed = share * (t - wall0) - (time.process_time() - cpu0)
        if owed > 0.3:  # held back (the CPU limit): forgive what cannot be caught up
            cpu0 -= owed - 0.3
        if owed > 0:
            for _ in range(10000):
                pass
        else:  # ahead: sleep until owing again (idle: the whole period; few wake-ups on a slow guest)
            time.sleep(min(end - t, -owed / share if share > 0 else end - t))
"""


class Load:
    """The demand file the pods read: total cores, and MiB each pod holds."""

    def __init__(self, work: Path) -> None:
        self.work = work
        (work / "alive").mkdir(parents=True)
        self.set(0.0, 0)

    def heartbeats(self) -> int:
        """How many pods' loops beat within the last 1.5 s."""
        now = time.time()
        return sum(1 for f in (self.work / "alive").iterdir() if now - f.stat().st_mtime < 1.5)

    def set(self, cores: float, mib: int) -> None:
        tmp = self.work / "load.tmp"
        tmp.write_text(f"{cores} {mib}\n")
        tmp.replace(self.work / "load")


@pytest.fixture
def cluster(server: SecureServer, make_agent: Callable[..., AgentProcess],
            tmp_path: Path) -> Iterator[tuple[SecureServer, AgentProcess, Load]]:
    """The conftest's server and agent; the server restarted to scrape the agent every second with
    its token (its API is plain HTTP on loopback) and with short autoscaler periods. Afterwards the
    workload is deleted through the server, and its pods gone, before the agent is cleaned up (the
    server would otherwise keep asking the agent for them)."""
    agent = make_agent(extra_config={"kubeconfig": str(server.node_kubeconfig(NODE_NAME)),
                                     "nodeStatusUpdateFrequency": "1s", "statsInterval": "1s",
                                     "statsCPURateWindow": "1s"})
    server.stop()
    with server.config.open("a") as f:
        f.write(SERVER_CONFIG + f"metricsScrape: {{tokenFile: {agent.workdir / 'token'}}}\n")
    server.start()
    poll_until(lambda: "Ready" in server.kubectl("get", "node", NODE_NAME, check=False).stdout, 30,
               "the node to be Ready")
    yield server, agent, Load(tmp_path / "work")
    server.kubectl("delete", "hpa,vpa,deployments", "--all", "--wait=false", check=False)
    poll_until(lambda: not server.get_json("pods")["items"], 60, "the workload's pods to be gone", interval=0.5)


def apply(server: SecureServer, obj: dict[str, Any]) -> None:
    path = server.tmp / f"{obj['kind'].lower()}-{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    server.kubectl("apply", "-f", str(path))


def deployment(load: Load, replicas: int, memory: str, memory_limit: str) -> dict[str, Any]:
    """No readiness probe: an exec probe runs in the pod's cgroup, and on the UML guest a fork and exec
    costs the pod tens of milliseconds of CPU a second, utilization the HPA would scale on. The
    interpreter starts without site (-S): less start-up CPU."""
    container = {"name": "main", "image": "busybox", "command": [sys.executable, "-S", "-c", BURN, str(load.work)],
                 "resources": {"requests": {"cpu": "100m", "memory": memory},
                               "limits": {"cpu": "200m", "memory": memory_limit}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": APP}},
                     "template": {"metadata": {"labels": {"app": APP},
                                               "annotations": {"nodeagent.io/host-process": "true"}},
                                  "spec": {"containers": [container], "terminationGracePeriodSeconds": 1}}}}


def hpa(max_replicas: int) -> dict[str, Any]:
    """CPU at 50% of requests; short stabilization windows both ways (upstream's remedy for start-up
    CPU bursts chaining scale-ups, kubernetes#28692: a burst must last the window to scale up)."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": APP, "namespace": "default"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                     "minReplicas": 1, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
                     "behavior": {"scaleUp": {"stabilizationWindowSeconds": UP_WINDOW_S},
                                  "scaleDown": {"stabilizationWindowSeconds": WINDOW_S}}}}


class Timeline:
    """The Deployment's spec.replicas, the HPA's CPU utilization and the pods' requests, sampled by the
    test through the official Python client (a kubectl process twice a second would be most of the
    UML guest's one CPU)."""

    def __init__(self, server: SecureServer) -> None:
        import kubernetes
        self.server, self.started = server, time.monotonic()
        self.client = kubernetes.config.new_client_from_config(str(server.admin))
        self.apps = kubernetes.client.AppsV1Api(self.client)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.autoscaling = kubernetes.client.AutoscalingV2Api(self.client)
        self.replicas: list[tuple[float, int]] = []
        self.utilization: list[tuple[float, int | None]] = []  # the HPA's currentMetrics, when it changes
        self.requests: dict[str, list[tuple[int, int]]] = {}  # pod -> distinct (cpu milli, memory bytes)

    def sample(self) -> tuple[int, list[dict[str, Any]]]:
        now = round(time.monotonic() - self.started, 1)
        n = int(self.apps.read_namespaced_deployment(APP, "default").spec.replicas)
        if not self.replicas or self.replicas[-1][1] != n:
            self.replicas.append((now, n))
        hpas = self.autoscaling.list_namespaced_horizontal_pod_autoscaler("default").items
        metrics = (hpas[0].status.current_metrics or []) if hpas and hpas[0].status else []
        utilization = metrics[0].resource.current.average_utilization if metrics and metrics[0].resource else None
        if hpas and (not self.utilization or self.utilization[-1][1] != utilization):
            self.utilization.append((now, utilization))
        listed = self.client.sanitize_for_serialization(
            self.core.list_namespaced_pod("default", label_selector=f"app={APP}"))
        pods = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
        for p in pods:
            req = p["spec"]["containers"][0]["resources"]["requests"]
            seen = (parse_quantity(req["cpu"]).milli_value(), parse_quantity(req["memory"]).value())
            history = self.requests.setdefault(p["metadata"]["name"], [])
            if not history or history[-1] != seen:
                history.append(seen)
        return n, pods

    def until(self, check: Callable[[int, list[dict[str, Any]]], bool], timeout: float, what: str) -> None:
        last: list[dict[str, Any]] = []

        def step() -> bool:
            n, pods = self.sample()
            last[:] = pods
            return check(n, pods)

        try:
            poll_until(step, timeout, what, interval=0.5)
        except AssertionError as e:
            state = [(p["metadata"]["name"], p.get("spec", {}).get("nodeName"), p.get("status", {}).get("phase"),
                      p.get("status", {}).get("conditions"), p.get("status", {}).get("containerStatuses"))
                     for p in last]
            raise AssertionError(f"{e}\nreplicas {self.replicas}\nutilization {self.utilization}\n"
                                 f"pods {json.dumps(state)}\n"
                                 f"events {self.server.kubectl('get', 'events', check=False).stdout[-3000:]}") from e

    def hold(self, seconds: float) -> None:
        """Keep sampling for `seconds` (a window in which nothing may change, not a wait)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample()
            time.sleep(0.5)

    def sizes(self) -> list[int]:
        return [n for _, n in self.replicas]


def warm_up(tl: Timeline, load: Load) -> None:
    """The first pod Ready and its loop running (its heartbeat seen): the autoscalers come after its
    start-up. (Without a readiness probe a pod is Ready as it starts, so upstream's CPU initialization
    period would count the interpreter's start-up, seconds of CPU on the UML guest, as load.)"""
    tl.until(lambda n, pods: n == 1 and ready_pods(pods) == 1, 60, "one Ready pod")
    poll_until(lambda: load.heartbeats() == 1, 60, "the pod's loop to run", interval=0.5)
    tl.hold(3)


def _is(check: Callable[[], None]) -> bool:
    try:
        check()
    except AssertionError:
        return False
    return True


def memory_request(pod: dict[str, Any]) -> int:
    return parse_quantity(pod["spec"]["containers"][0]["resources"]["requests"]["memory"]).value()


def ready_pods(pods: list[dict[str, Any]]) -> int:
    return sum(any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))
               for p in pods)


def reversals(series: list[int]) -> int:
    signs = [1 if b > a else -1 for a, b in itertools.pairwise(series) if a != b]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def test_hpa_scales_up_on_real_cpu_and_down_after_the_window(
        cluster: tuple[SecureServer, AgentProcess, Load]) -> None:
    server, _agent, load = cluster
    apply(server, deployment(load, 1, "32Mi", "64Mi"))
    tl = Timeline(server)
    warm_up(tl, load)
    apply(server, hpa(3))
    tl.hold(3)  # idle: the HPA sees utilization near 0 and keeps minReplicas
    assert tl.sizes() == [1], tl.replicas

    step = time.monotonic()
    load.set(0.3, 0)  # 300m over the pods: 200m (the limit) on one pod, 200% of its request
    tl.until(lambda n, pods: n == 3 and ready_pods(pods) == 3, 30, "3 Ready replicas")
    up_s = time.monotonic() - step
    tl.hold(4)  # 100m a pod, 100% of requests: more would be wanted, max is 3; never down under load
    hpa_status = server.get_json("hpa", APP)["status"]
    print("scale-up in", round(up_s, 1), "s; hpa status:", json.dumps(hpa_status))
    assert hpa_status["currentMetrics"][0]["resource"]["current"]["averageUtilization"] >= 60, hpa_status
    assert tl.sizes()[-1] == 3

    drop = time.monotonic()
    load.set(0.0, 0)
    tl.until(lambda n, pods: n == 1, 90, "back to minReplicas")
    down_s = time.monotonic() - drop
    tl.hold(2)
    print("replicas timeline (s, replicas):", tl.replicas, "scale-down after", round(down_s, 1), "s")
    print("HPA cpu utilization timeline (s, %):", tl.utilization)
    sizes = tl.sizes()
    assert sizes[0] == 1 and max(sizes) == 3 and sizes[-1] == 1, tl.replicas
    assert reversals(sizes) == 1, f"up, then down, no flapping: {tl.replicas}"
    assert down_s >= WINDOW_S, f"scaled down {down_s:.1f} s after the drop, inside the {WINDOW_S} s window"
    events = server.kubectl("get", "events", "--field-selector", f"involvedObject.name={APP}").stdout
    assert "SuccessfulRescale" in events and "All metrics below target" in events, events


def test_hpa_on_cpu_and_vpa_on_memory_of_one_deployment_do_not_fight(
        cluster: tuple[SecureServer, AgentProcess, Load]) -> None:
    server, agent, load = cluster
    # memory limit 8x the request: the VPA scales both (RequestsAndLimits), the limit stays far above use
    apply(server, deployment(load, 1, "16Mi", "128Mi"))
    tl = Timeline(server)
    load.set(0.0, 8)
    warm_up(tl, load)
    apply(server, hpa(3))
    apply(server, {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                   "metadata": {"name": APP, "namespace": "default"},
                   "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                            "updatePolicy": {"updateMode": "InPlaceOrRecreate", "minReplicas": 1}}})
    first = tl.sample()[1][0]
    name, uid = first["metadata"]["name"], first["metadata"]["uid"]
    path = f"kubepods/burstable/pod{uid}/main"
    pid = poll_until(lambda: running_pid(agent.pod(name)), 10, "the pod's process")

    # 1. the VPA leaves cpu to the HPA and sizes memory from the real working set, in place
    def vpa() -> dict[str, Any]:
        got: dict[str, Any] = server.get_json("vpa", APP)
        return got

    poll_until(lambda: any(c["type"] == "ConfigUnsupported" and c["status"] == "True"
                           for c in vpa().get("status", {}).get("conditions", [])), 20, "ConfigUnsupported")
    tl.until(lambda n, pods: any(p["metadata"]["name"] == name and parse_quantity(
        p["spec"]["containers"][0]["resources"]["requests"]["memory"]).value() > 16 * MI for p in pods),
        30, "the pod's memory request raised from 16Mi")
    target = vpa()["status"]["recommendation"]["containerRecommendations"][0]["target"]
    assert set(target) == {"memory"}, target  # cpu is the HPA's
    resized = next(p for p in tl.sample()[1] if p["metadata"]["name"] == name)
    limit = parse_quantity(resized["spec"]["containers"][0]["resources"]["limits"]["memory"]).value()
    poll_until(lambda: _is(lambda: expect_memory(agent.cg, path, limit)), 20, f"memory.max to become {limit}")
    assert running_pid(agent.pod(name)) == pid and pid[0] in agent.cg.pids(path)  # the same process

    # 2. CPU load: the HPA adds pods (admitted with the VPA's memory, their cpu as asked)
    load.set(0.3, 8)
    tl.until(lambda n, pods: n == 3 and ready_pods(pods) == 3, 60, "3 Ready replicas")
    tl.hold(3)
    # 3. memory grows too (at maxReplicas: the page faults' CPU, real on the UML guest, cannot add
    # pods): the recommendation follows it and the running pods are resized in place
    before = {p["metadata"]["name"]: memory_request(p) for p in tl.sample()[1]}
    load.set(0.3, 40)

    def followed(n: int, pods: list[dict[str, Any]]) -> bool:
        return len(pods) == 3 and all(memory_request(p) >= before.get(p["metadata"]["name"], 0) + 24 * MI
                                      for p in pods)

    tl.until(followed, 60, "the memory requests to follow 32 MiB more")
    # 4. the CPU load ends: back to one pod after the window; memory stays
    load.set(0.0, 40)
    tl.until(lambda n, pods: n == 1 and len(pods) == 1, 90, "back to one pod")
    tl.hold(3)
    grown = tl.sample()[1][0]
    print("replicas timeline (s, replicas):", tl.replicas)
    print("HPA cpu utilization timeline (s, %):", tl.utilization)
    print("requests per pod (cpu m, memory MiB):",
          {p: [(c, m >> 20) for c, m in h] for p, h in tl.requests.items()})
    print("vpa status:", json.dumps(vpa()["status"]))
    if grown["metadata"]["name"] == name:  # the first pod survived the scale-down: the same process still
        assert running_pid(agent.pod(name)) == pid
    sizes = tl.sizes()
    assert sizes[0] == 1 and max(sizes) == 3 and sizes[-1] == 1 and reversals(sizes) == 1, tl.replicas
    for pod, history in tl.requests.items():
        assert {c for c, _ in history} == {100}, f"{pod}: the VPA moved the HPA's cpu: {history}"
        memories = [m for _, m in history]
        assert memories == sorted(memories), f"{pod}: memory requests went back and forth: {history}"
    assert max(m for h in tl.requests.values() for _, m in h) >= 48 * MI
