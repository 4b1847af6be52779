"""Scheduling throughput on the new control plane: `nodeagent server run`'s ControlPlane in process
(SQLite store, durable commits), hollow Node objects, pods created over HTTP by 16 concurrent
clients, each binding through pods/binding; the bound times come from a watch on the registry.

  steady:  pods created while the scheduler runs: create (201) -> bound (the watch shows nodeName)
  burst:   pods created before any node exists (each fails once), then the nodes: all bound at pods/s

    .venv/bin/python bench/cpscheduler_bench.py [--pods 1000] [--nodes 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from typing import Any

import aiohttp
import psutil

from nodeagent.cluster.controlplane import ControlPlane
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.daemonkit.heap import freeze_startup_heap

CLIENTS = 16


def node(i: int) -> dict[str, Any]:
    alloc = {"cpu": "32", "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"hollow-{i:04d}", "labels": {"zone": str(i % 3)}},
            "status": {"allocatable": alloc, "capacity": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(ns: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i:05d}", "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "1d"],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def cpu() -> float:
    """CPU seconds of this process (server, scheduler and clients) and its children (the SQLite writer)."""
    me = psutil.Process()
    t = me.cpu_times()
    return t.user + t.system + sum(c.cpu_times().user + c.cpu_times().system for c in me.children(recursive=True))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def post_all(session: aiohttp.ClientSession, url: str, bodies: list[dict[str, Any]],
                   created: dict[str, float] | None = None) -> None:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)

    async def client() -> None:
        while not queue.empty():
            body = queue.get_nowait()
            ns = body["metadata"].get("namespace")
            path = f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/nodes"
            async with session.post(url + path, json=body) as resp:
                assert resp.status == 201, await resp.text()
                if created is not None:
                    created[body["metadata"]["name"]] = time.perf_counter()

    await asyncio.gather(*(client() for _ in range(CLIENTS)))


async def run(pods: int, nodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = parse_server_config({"port": 0, "storage": {"backend": "sqlite", "path": f"{tmp}/state.db"},
                                      "logging": {"level": "warning"}}, "bench")
        cp = ControlPlane(config)
        port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # as `nodeagent server run`: the start-up heap frozen once it listens (cli/controlplane_commands.py)
        server = asyncio.create_task(cp.run(ready=lambda p: (freeze_startup_heap(), port.set_result(p))))
        url = f"http://127.0.0.1:{await port}"
        registry_pods = cp.registry.resource("", "v1", "pods") if cp.registry else None
        assert registry_pods is not None
        bound: dict[str, float] = {}

        async def watch() -> None:
            start = await registry_pods.watch(None, ListOptions(watch=True))
            while True:
                item = await start.subscription.next(None)
                if item is not None and (item.object.get("spec") or {}).get("nodeName"):
                    bound.setdefault(item.object["metadata"]["name"], time.perf_counter())

        watcher = asyncio.create_task(watch())
        async with aiohttp.ClientSession() as session:
            for ns in ("steady", "burst"):
                async with session.post(url + "/api/v1/namespaces", json={"metadata": {"name": ns}}) as r:
                    assert r.status == 201
            # burst: pods first, then the nodes
            burst = [pod("burst", i) for i in range(pods)]
            await post_all(session, url, burst)
            await asyncio.sleep(1.0)
            t_nodes, c_nodes = time.perf_counter(), cpu()
            await post_all(session, url, [node(i) for i in range(nodes)])
            while len(bound) < pods:
                await asyncio.sleep(0.01)
            burst_s = max(bound.values()) - t_nodes
            burst_cpu = cpu() - c_nodes
            bound.clear()
            # steady: created while the scheduler runs
            created: dict[str, float] = {}
            t0, c0 = time.perf_counter(), cpu()
            await post_all(session, url, [pod("steady", pods + i) for i in range(pods)], created)
            t_created = time.perf_counter()
            while len(bound) < pods:
                await asyncio.sleep(0.01)
            total = max(bound.values()) - t0
            steady_cpu = cpu() - c0
        latencies = [(bound[n] - created[n]) * 1000 for n in created]
        sched = cp.scheduler
        assert sched is not None
        print(f"new control plane scheduler, {nodes} hollow nodes, {pods} pods, {CLIENTS} HTTP clients, SQLite")
        print(f"  burst  (pods pending, then the nodes): {pods / burst_s:8.0f} pods/s bound ({burst_s:.2f} s)")
        print(f"  steady (created while scheduling):     {pods / total:8.0f} pods/s created+bound "
              f"(creates alone {pods / (t_created - t0):.0f}/s)")
        print(f"  CPU per pod (this process and the SQLite writer): burst {burst_cpu / pods * 1e3:.2f} ms "
              f"(incl. the {nodes} node creates), steady {steady_cpu / pods * 1e3:.2f} ms (incl. the HTTP clients)")
        print(f"  create->bound latency: p50 {statistics.median(latencies):.1f} ms, p99 {pct(latencies, 0.99):.1f} ms, "
              f"max {max(latencies):.1f} ms")
        print(f"  counters: {sched.counters}")
        watcher.cancel()
        cp.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=100)
    args = ap.parse_args()
    asyncio.run(run(args.pods, args.nodes))


if __name__ == "__main__":
    main()
