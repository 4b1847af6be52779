"""The control plane at the workloads issue's scale, against hollow nodes (kubemark/kwok's idea).

A real `nodeagent server run` process (SQLite, loopback, every controller on) and, in this process,
N hollow nodes: each registers a Node and renews its Lease exactly as the agent does (the agent's own
wire bodies, agent/cluster_client/bodies.py), and when a pod is bound to it reports it Running and
Ready through pods/status at once, and confirms graceful deletions (gracePeriodSeconds=0 with a uid
precondition, as the agent does). No process is spawned, so the figures measure the control plane:
API server, scheduler and controllers.

Scenarios (targets from the issue; upstream's scheduling SLO is pod startup p99 <= 5 s):
  rollout     a Deployment of --replicas (1000) on --nodes (100): create -> all available (<= 5 s)
  update      its rolling update with maxSurge 25%: template change -> complete (<= 15 s)
  fifty       --fifty (50) Deployments of 20 created at once -> all available
  idle        --idle-pods (10,000) pods held, then the server's CPU over --idle-seconds (<= 2% of a core)
Prints figures; asserts nothing.

    .venv/bin/python bench/hollow_cluster_bench.py [--nodes 100] [--replicas 1000] [--idle-pods 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodeagent.agent.cluster_client.bodies import NODE_LEASE_NAMESPACE, lease_for_create, renewed_lease

LEASE_S = 40
HOLLOW_VERSION = "v1.35.0-hollow"
TICK = os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def tree(pid: int) -> list[int]:
    """The server and its descendants (the SQLite committer runs in a child process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of the server's whole process tree."""
    total = 0
    for p in tree(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def rss_mib(pid: int) -> float:
    """RSS of the server's process tree."""
    total = 0
    for p in tree(pid):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def hollow_node(name: str) -> dict[str, Any]:
    now = rfc3339(time.time())
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "topology.kubernetes.io/zone": f"zone-{hash(name) % 3}"}},
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "hollow node", "lastHeartbeatTime": now,
                                       "lastTransitionTime": now}],
                       "nodeInfo": {"kubeletVersion": HOLLOW_VERSION, "operatingSystem": "linux",
                                    "architecture": "amd64"}}}


def running_status(pod: dict[str, Any], node: str) -> dict[str, Any]:
    now = rfc3339(time.time())
    containers = pod["spec"].get("containers") or []
    return {"status": {
        "phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": now,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                       for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                               "image": c.get("image", ""), "imageID": "",
                               "containerID": f"hollow://{node}/{pod['metadata']['uid']}/{c['name']}",
                               "state": {"running": {"startedAt": now}}} for c in containers]}}


class HollowNodes:
    """N fake agents over one pod watch: they register, renew their Leases, run what is bound to them
    (a status patch) and confirm graceful deletions. Latencies are kept per pod uid."""

    def __init__(self, session: aiohttp.ClientSession, url: str, count: int, workers: int = 32) -> None:
        self.s, self.url = session, url
        self.names = [f"hollow-{i:03d}" for i in range(count)]
        self.mine = set(self.names)
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.started: set[str] = set()
        self.finalized: set[str] = set()
        self.first_seen: dict[str, float] = {}
        self.bound_seen: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.errors = 0
        self.leases: dict[str, dict[str, Any] | None] = {}
        self.workers = workers
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for name in self.names:
            async with self.s.post(f"{self.url}/api/v1/nodes", json=hollow_node(name)) as r:
                assert r.status in (201, 409), await r.text()
            lease = lease_for_create(name, LEASE_S, time.time())
            async with self.s.post(f"{self.url}/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases",
                                   json=lease) as r:
                assert r.status in (201, 409), await r.text()
                self.leases[name] = await r.json() if r.status == 201 else None
        ready = asyncio.Event()
        self.tasks = [asyncio.create_task(self._watch(ready)), asyncio.create_task(self._heartbeats())]
        self.tasks += [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        await ready.wait()

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _heartbeats(self) -> None:
        """Every node renews its Lease each quarter of its duration, spread out, as the agent does
        (cluster_client/sync.py): PUT the Lease last seen, read it again only after a failure."""
        period = LEASE_S * 0.25
        while True:
            for name in self.names:
                path = f"{self.url}/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{name}"
                try:
                    lease = self.leases.get(name)
                    if lease is None:
                        async with self.s.get(path) as r:
                            lease = await r.json()
                    async with self.s.put(path, json=renewed_lease(lease, name, LEASE_S, time.time())) as r:
                        self.leases[name] = await r.json() if r.status == 200 else None
                except aiohttp.ClientError:
                    self.errors += 1
                await asyncio.sleep(period / len(self.names))

    async def _watch(self, ready: asyncio.Event) -> None:
        rv = ""
        while True:
            if not rv:
                async with self.s.get(f"{self.url}/api/v1/pods") as r:
                    body = await r.json()
                rv = body["metadata"]["resourceVersion"]
                for pod in body["items"]:
                    self._see(pod)
                ready.set()
            async with self.s.get(f"{self.url}/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
                                  f"&timeoutSeconds=600", timeout=aiohttp.ClientTimeout(total=None)) as r:
                async for line in r.content:
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        rv = ""
                        break
                    rv = ev["object"]["metadata"].get("resourceVersion", rv)
                    if ev["type"] != "BOOKMARK":
                        self._see(ev["object"], deleted=ev["type"] == "DELETED")

    def _see(self, pod: dict[str, Any], deleted: bool = False) -> None:
        uid, now = pod["metadata"]["uid"], time.perf_counter()
        self.first_seen.setdefault(uid, now)
        node = pod["spec"].get("nodeName")
        if deleted or node not in self.mine:
            return
        self.bound_seen.setdefault(uid, now)
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in self.finalized:
                self.finalized.add(uid)
                self.queue.put_nowait(("delete", pod))
        elif uid not in self.started and pod.get("status", {}).get("phase") in (None, "Pending"):
            self.started.add(uid)
            self.queue.put_nowait(("run", pod))

    async def _worker(self) -> None:
        while True:
            what, pod = await self.queue.get()
            meta = pod["metadata"]
            path = f"{self.url}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            try:
                if what == "run":
                    async with self.s.patch(path + "/status", json=running_status(pod, pod["spec"]["nodeName"]),
                                            headers={"Content-Type": "application/merge-patch+json"}) as r:
                        await r.read()
                        if r.status == 200:
                            self.running_at[meta["uid"]] = time.perf_counter()
                else:
                    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                            "preconditions": {"uid": meta["uid"]}}
                    async with self.s.delete(path, json=body) as r:
                        await r.read()
            except aiohttp.ClientError:
                self.errors += 1

    def startup(self, uids: set[str]) -> tuple[float, float]:
        """Pod startup latency (first seen by the watch -> reported Running), p50/p99 in seconds."""
        lat = [self.running_at[u] - self.first_seen[u] for u in uids if u in self.running_at and u in self.first_seen]
        return pct(lat, 0.5), pct(lat, 0.99)


def deployment(name: str, replicas: int, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
                                                           "command": ["sleep", "3600"],
                                                           "resources": {"requests": {"cpu": "10m",
                                                                                      "memory": "16Mi"}}}]}}}}


async def deployment_done(s: aiohttp.ClientSession, url: str, name: str, replicas: int, ns: str = "default") -> bool:
    async with s.get(f"{url}/apis/apps/v1/namespaces/{ns}/deployments/{name}") as r:
        d = await r.json()
    st, gen = d.get("status") or {}, d["metadata"].get("generation")
    return (st.get("observedGeneration") == gen and st.get("updatedReplicas") == replicas
            and st.get("availableReplicas") == replicas and st.get("replicas") == replicas)


async def wait_all(s: aiohttp.ClientSession, url: str, names: list[str], replicas: int, timeout: float) -> float:
    """Seconds until every named Deployment is complete (nan on timeout)."""
    t0 = time.perf_counter()
    pending = set(names)
    while pending and time.perf_counter() - t0 < timeout:
        done = await asyncio.gather(*(deployment_done(s, url, n, replicas) for n in sorted(pending)))
        pending -= {n for n, ok in zip(sorted(pending), done, strict=True) if ok}
        if pending:
            await asyncio.sleep(0.05)
    return time.perf_counter() - t0 if not pending else float("nan")


async def pod_uids(s: aiohttp.ClientSession, url: str, selector: str) -> set[str]:
    async with s.get(f"{url}/api/v1/pods?labelSelector={selector}") as r:
        return {p["metadata"]["uid"] for p in (await r.json())["items"]}


async def delete_and_wait(s: aiohttp.ClientSession, url: str, names: list[str], timeout: float = 120) -> None:
    for n in names:
        async with s.delete(f"{url}/apis/apps/v1/namespaces/default/deployments/{n}",
                            json={"kind": "DeleteOptions", "apiVersion": "v1",
                                  "propagationPolicy": "Background"}) as r:
            await r.read()
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        async with s.get(f"{url}/api/v1/namespaces/default/pods?limit=1") as r:
            if not (await r.json())["items"]:
                return
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace, url: str, pid: int) -> None:
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as s:
        nodes = HollowNodes(s, url, args.nodes)
        t = time.perf_counter()
        await nodes.start()
        print(f"hollow nodes: {args.nodes} registered with Leases in {time.perf_counter() - t:.2f} s")
        try:
            await scenarios(args, s, url, pid, nodes)
        finally:
            await nodes.stop()
        print(f"hollow-node request errors: {nodes.errors}")


async def scenarios(args: argparse.Namespace, s: aiohttp.ClientSession, url: str, pid: int,
                    nodes: HollowNodes) -> None:
    if "rollout" in args.scenarios:
        await rollout(args, s, url, pid, nodes)
    if "fifty" in args.scenarios:
        await fifty(args, s, url, pid, nodes)
    if "idle" in args.scenarios:
        await idle(args, s, url, pid)


async def rollout(args: argparse.Namespace, s: aiohttp.ClientSession, url: str, pid: int,
                  nodes: HollowNodes) -> None:
    n = args.replicas
    cpu0 = cpu_seconds(pid)
    async with s.post(f"{url}/apis/apps/v1/namespaces/default/deployments", json=deployment("big", n)) as r:
        assert r.status == 201, await r.text()
    took = await wait_all(s, url, ["big"], n, args.timeout)
    p50, p99 = nodes.startup(await pod_uids(s, url, "app%3Dbig"))
    print(f"rollout: Deployment of {n} on {args.nodes} nodes, create -> all available {took:.2f} s "
          f"(target <= 5 s); pod startup p50 {p50 * 1000:.0f} ms p99 {p99 * 1000:.0f} ms (upstream SLO p99 <= 5 s); "
          f"server CPU {cpu_seconds(pid) - cpu0:.2f} s")

    cpu0 = cpu_seconds(pid)
    patch = {"spec": {"template": {"metadata": {"annotations": {"bench/rev": "2"}}}}}
    async with s.patch(f"{url}/apis/apps/v1/namespaces/default/deployments/big", json=patch,
                       headers={"Content-Type": "application/merge-patch+json"}) as r:
        assert r.status == 200, await r.text()
    took = await wait_all(s, url, ["big"], n, args.timeout)
    old = await pod_uids(s, url, "app%3Dbig")
    print(f"update: rolling update of {n} (maxSurge 25%) -> complete {took:.2f} s (target <= 15 s); "
          f"server CPU {cpu_seconds(pid) - cpu0:.2f} s; pods now {len(old)}")
    await delete_and_wait(s, url, ["big"])


async def fifty(args: argparse.Namespace, s: aiohttp.ClientSession, url: str, pid: int, nodes: HollowNodes) -> None:
    names = [f"d{i:02d}" for i in range(args.fifty)]
    cpu0 = cpu_seconds(pid)
    results = await asyncio.gather(*(s.post(f"{url}/apis/apps/v1/namespaces/default/deployments",
                                            json=deployment(nm, 20)) for nm in names))
    for r in results:
        assert r.status == 201, await r.text()
        r.release()
    took = await wait_all(s, url, names, 20, args.timeout)
    uids: set[str] = set()
    for nm in names:
        uids |= await pod_uids(s, url, f"app%3D{nm}")
    p50, p99 = nodes.startup(uids)
    print(f"fifty: {args.fifty} Deployments of 20 created at once -> all available {took:.2f} s; "
          f"pod startup p50 {p50 * 1000:.0f} ms p99 {p99 * 1000:.0f} ms; server CPU {cpu_seconds(pid) - cpu0:.2f} s")
    await delete_and_wait(s, url, names)


async def idle(args: argparse.Namespace, s: aiohttp.ClientSession, url: str, pid: int) -> None:
    per = 1000
    count = args.idle_pods // per
    names = [f"idle{i:02d}" for i in range(count)]
    for nm in names:
        async with s.post(f"{url}/apis/apps/v1/namespaces/default/deployments", json=deployment(nm, per)) as r:
            assert r.status == 201, await r.text()
    took = await wait_all(s, url, names, per, args.timeout * 4) if names else 0.0
    print(f"idle: {count * per} pods held ({count} Deployments of {per}) available in {took:.2f} s; "
          f"server RSS {rss_mib(pid):.0f} MiB")
    await asyncio.sleep(2)
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(args.idle_seconds)
    busy = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0) * 100
    print(f"idle: server CPU over {args.idle_seconds:.0f} s with {count * per} pods and {args.nodes} nodes "
          f"renewing Leases every {LEASE_S * 0.25:.0f} s: {busy:.2f}% of one core (target <= 2%)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--fifty", type=int, default=50)
    ap.add_argument("--idle-pods", type=int, default=10_000)
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--scenarios", default="rollout,fifty,idle",
                    help="comma-separated: rollout (create, then the rolling update), fifty, idle")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hollow-bench-"))
    cfg = tmp / "server.yaml"
    cfg.write_text(f"port: 0\nstorage: {{backend: sqlite, path: {tmp}/state.db}}\nlogging: {{format: json}}\n"
                   f"controllers: ['*']\n")
    log_path = tmp / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "server", "run", "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while '"server_listening"' not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("server did not start: " + log_path.read_text()[-2000:])
            time.sleep(0.05)
        port = next(json.loads(line)["port"] for line in log_path.read_text().splitlines()
                    if "server_listening" in line)
        print(f"server pid {proc.pid}", flush=True)
        args.scenarios = set(args.scenarios.split(","))
        asyncio.run(run(args, f"http://127.0.0.1:{port}", proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(f"server log: {log_path}")


if __name__ == "__main__":
    main()
