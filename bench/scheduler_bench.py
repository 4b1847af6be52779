"""Scheduler core throughput: queue -> filter/score -> bind, in process, no store.

Cases:
  plain       5000 nodes, 10000 pods of which 1000 are already bound; every other pod goes
              through the queue, is converted once (PodInfo), filtered, scored and bound, and
              the bind is recorded in a dict (standing in for the store write).
  preemption  5000 nodes full of priority-0 pods; a stream of priority-1000 pods that each
              need preemption: victims unbound and recorded, the pod bound and recorded.
  service     the plain and preemption cases through the real scheduler service: queue, binder,
              state accounting, bind tasks, and the store's writes (2 per pod: the binding, then
              the agent's acceptance), with in-process agents that accept at once; stores:
              memory (no I/O); normal and full: SQLite with that storeSync in the scheduler's
              writer process (one transaction per write); thread-normal: the same SQLite on a
              writer thread instead (what the writer process replaced: GIL contention).
  scale       the plain case at 500, 5000 and 15000 nodes.
Pods are parsed (parse_pod) before the clock starts: they arrive from the store already parsed.
After each case's setup the heap is collected and frozen (gc.freeze), as a long-running scheduler
would do once its state is loaded, so full collections do not rescan the node table and the bound
pods; --no-gc-freeze shows the difference.
Prints figures; the last line is `pods/s: N` for the plain case. Never asserts timings.

    .venv/bin/python bench/scheduler_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from nodeagent.cluster.scheduler.framework import FitError, Framework, PodInfo, Scheduled
from nodeagent.cluster.scheduler.node_table import NodeSpec, NodeTable, Taint
from nodeagent.cluster.scheduler.preemption import Preemption, preempt
from nodeagent.cluster.scheduler.queue import SchedulingQueue
from nodeagent.core.clock import SystemClock
from nodeagent.core.model import Pod, parse_pod

GI = 2**30
CPUS = ["100m", "250m", "500m", "1", "2"]
MEMS = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"]


def make_nodes(count: int, rng: random.Random) -> list[NodeSpec]:
    nodes = []
    for i in range(count):
        cpu, mem = rng.choice([(8000, 32 * GI), (16000, 64 * GI), (32000, 128 * GI)])
        taints = (Taint("dedicated", "gpu"),) if i % 50 == 0 else ()
        nodes.append(NodeSpec(f"node-{i:05d}", {"cpu": cpu, "memory": mem,
                                                 "ephemeral-storage": 100 * GI, "pods": 110},
                              labels={"kubernetes.io/hostname": f"node-{i:05d}",
                                      "topology.kubernetes.io/zone": f"zone-{i % 3}"},
                              taints=taints, memory_pressure=(i % 997 == 0)))
    return nodes


def make_pod(i: int, rng: random.Random, priority: int = 0, cpu: str | None = None,
             mem: str | None = None, constraints: bool = True) -> Pod:
    """A one-container pod; every 10th has a zone nodeSelector, every 25th a toleration."""
    spec: dict[str, Any] = {"priority": priority, "containers": [
        {"name": "app", "command": ["sleep", "inf"],
         "resources": {"requests": {"cpu": cpu or rng.choice(CPUS),
                                    "memory": mem or rng.choice(MEMS)}}}]}
    if constraints and i % 10 == 0:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": f"zone-{i % 3}"}
    if constraints and i % 25 == 0:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]
    return parse_pod({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"pod-{i}", "namespace": f"ns-{i % 20}",
                                   "uid": f"uid-{i}"}, "spec": spec})


FREEZE = True
LAST_SERVICE: Any = None  # the service case's scheduler, for a debugger
PROFILER: Any = None  # a cProfile.Profile to enable around the service cases' timed part


def settle() -> None:
    """Collect, then freeze what survives (the case's long-lived state)."""
    gc.unfreeze()
    gc.collect()
    if FREEZE:
        gc.freeze()


def percentiles(samples: list[float]) -> str:
    a = np.array(samples) * 1e6
    return " ".join(f"p{p}={np.percentile(a, p):.0f}us" for p in (50, 90, 99, 99.9))


def plain(nodes: int, pods: int, bound: int, seed: int = 1) -> float:
    rng = random.Random(seed)
    table = NodeTable(capacity=nodes)
    for spec in make_nodes(nodes, rng):
        table.upsert(spec)
    fw = Framework(table)
    manifests = [make_pod(i, rng) for i in range(pods)]
    for pod in manifests[:bound]:  # already running: bound without scheduling
        info = PodInfo.from_pod(pod)
        table.bind(info, table.names[rng.randrange(nodes)])
    pending = manifests[bound:]
    bindings: dict[str, str] = {}
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(SystemClock())
    latencies, unschedulable = [], 0
    settle()
    cpu0, start = time.process_time(), time.perf_counter()
    for pod in pending:
        info = PodInfo.from_pod(pod)
        queue.add(info.key, info, info.priority)
    while (qp := queue.pop()) is not None:
        t0 = time.perf_counter()
        result = fw.schedule(qp.item)
        if isinstance(result, Scheduled):
            table.bind(qp.item, result.node)
            bindings[qp.key] = result.node  # the store write
            queue.done(qp.key)
        else:
            unschedulable += 1
            queue.done(qp.key)
        latencies.append(time.perf_counter() - t0)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    rate = len(pending) / elapsed
    print(f"  {nodes} nodes, {len(pending)} pods (+{bound} bound): {rate:,.0f} pods/s "
          f"({len(pending) / cpu:,.0f} per cpu-second), {elapsed:.2f} s wall, {cpu:.2f} s cpu, "
          f"{unschedulable} unschedulable")
    print(f"    per-pod cycle (filter+score+bind): {percentiles(latencies)}")
    return rate


def preemption(nodes: int, preemptors: int, per_node: int = 8, seed: int = 2) -> float:
    rng = random.Random(seed)
    table = NodeTable(capacity=nodes)
    for i in range(nodes):
        table.upsert(NodeSpec(f"node-{i:05d}", {"cpu": 4000, "memory": 16 * GI, "pods": 110}))
    fw = Framework(table)
    k = 0
    for i in range(nodes):  # each node full: per_node pods of 500m / 2Gi at priority 0
        for _ in range(per_node):
            table.bind(PodInfo(f"low/p{k}", {"cpu": 500, "memory": 2 * GI}), f"node-{i:05d}")
            k += 1
    high = [make_pod(i, rng, priority=1000, cpu="1", mem="4Gi", constraints=False)
            for i in range(preemptors)]
    bindings: dict[str, str] = {}
    deleted: list[str] = []
    latencies, victims, failed = [], 0, 0
    settle()
    cpu0, start = time.process_time(), time.perf_counter()
    for pod in high:
        t0 = time.perf_counter()
        info = PodInfo.from_pod(pod)
        result = fw.schedule(info)
        if isinstance(result, FitError):
            choice = preempt(table, info, result)
            if isinstance(choice, Preemption):
                for v in choice.victims:
                    table.unbind(v.key)
                    deleted.append(v.key)  # the store delete
                victims += len(choice.victims)
                table.bind(info, choice.node)
                bindings[info.key] = choice.node
            else:
                failed += 1
        else:
            table.bind(info, result.node)
            bindings[info.key] = result.node
        latencies.append(time.perf_counter() - t0)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    rate = len(high) / elapsed
    print(f"  {nodes} nodes x {per_node} low-priority pods, {len(high)} preemptors: "
          f"{rate:,.0f} pods/s ({len(high) / cpu:,.0f} per cpu-second), {elapsed:.2f} s wall, "
          f"{cpu:.2f} s cpu, {victims} victims, {failed} failed")
    print(f"    per-pod cycle (filter+preempt+evict+bind): {percentiles(latencies)}")
    return rate


class InstantAgents:
    """Agents that accept every pod at once: the service's bind path without the network."""

    def __init__(self) -> None:
        self.created = 0

    async def create_pod(self, node: str, url: str, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created += 1
        return {"status": {"phase": "Running", "qosClass": "Burstable"}}

    async def delete_pod(self, node: str, url: str, ns: str, name: str, grace: int | None) -> None:
        return None

    async def get_pod(self, *args: Any) -> None:
        return None

    async def get_node(self, *args: Any) -> dict[str, Any]:
        raise AssertionError("not polled in the benchmark")

    list_pods = get_node

    async def close(self) -> None:
        pass


def _report(spec: NodeSpec) -> dict[str, Any]:
    alloc = {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in spec.allocatable.items()}
    conds = [{"type": "MemoryPressure", "status": "True" if spec.memory_pressure else "False"},
             {"type": "Ready", "status": "True"}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": spec.name, "labels": dict(spec.labels)},
            "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.taints]},
            "status": {"allocatable": alloc, "conditions": conds}}


async def _service_case(nodes: int, pods: int, bound: int, store: str, preempt_case: bool) -> tuple[float, str]:
    """The real service (binder, state, store writes, bind tasks) with agents that answer at once."""
    import tempfile

    from nodeagent.cluster.config import parse_scheduler_config
    from nodeagent.cluster.objects import POD_SCHEDULED, condition, new_pod, set_condition
    from nodeagent.cluster.server import SchedulerService
    from nodeagent.cluster.store.sqlite import SchedulerMemoryStore, SchedulerSqliteStore

    rng = random.Random(4)
    tmp = tempfile.mkdtemp(prefix="sched-bench-")
    cfg = parse_scheduler_config({"authentication": "none", "stateDir": tmp,
                                  "storeSync": "full" if store.endswith("full") else "normal"}, "bench")
    if store == "memory":
        backend: Any = SchedulerMemoryStore()
    elif store.startswith("thread"):
        backend = SchedulerSqliteStore(f"{tmp}/s.db", sync=cfg.store_sync)
    else:
        backend = None  # the scheduler's own: SQLite in its writer process
    svc = SchedulerService(cfg, store=backend, agents=InstantAgents())  # type: ignore[arg-type]
    global LAST_SERVICE
    LAST_SERVICE = svc
    svc.store.load()
    await svc.store.start()
    specs = make_nodes(nodes, rng) if not preempt_case else [
        NodeSpec(f"node-{i:05d}", {"cpu": 4000, "memory": 16 * GI, "pods": 110}) for i in range(nodes)]
    for spec in specs:
        svc.state.node(spec.name).url = "http://bench"
        svc.node_heard(spec.name, _report(spec))

    def record(pod: Pod, prio: int = 0) -> Any:
        return new_pod(pod.to_dict(), priority=prio, class_name=None,
                       preemption_policy="PreemptLowerPriority", now_wall=0.0)

    if preempt_case:  # every node full of priority-0 pods, then a stream of priority-1000 ones
        for i in range(nodes):
            for k in range(8):
                rec = record(make_pod(i * 8 + k, rng, cpu="500m", mem="2Gi", constraints=False))
                rec.obj["spec"]["nodeName"] = specs[i].name
                set_condition(rec.status, condition(POD_SCHEDULED, True, 0.0))
                svc.state.add_pod(rec)
        pending = [record(make_pod(10**6 + i, rng, cpu="1", mem="4Gi", constraints=False), 1000)
                   for i in range(pods)]
    else:
        manifests = [make_pod(i, rng) for i in range(pods)]
        for pod in manifests[:bound]:
            rec = record(pod)
            rec.obj["spec"]["nodeName"] = specs[rng.randrange(nodes)].name
            set_condition(rec.status, condition(POD_SCHEDULED, True, 0.0))
            svc.state.add_pod(rec)
        pending = [record(p) for p in manifests[bound:]]
    for rec in pending:  # the API's own write of each new pod, before the clock starts
        svc.state.add_pod(rec)
    await svc.store.flush()
    settle()
    writes0 = svc.store.revision
    if PROFILER is not None:
        PROFILER.enable()
    cpu0, start = time.process_time(), time.perf_counter()
    loop = asyncio.get_running_loop()
    runner = loop.create_task(svc.binder.run())
    for rec in pending:
        svc.binder.enqueue(rec)
    target = len(pending)
    while svc.binder.counters["bound"] < target and svc.binder.counters["unschedulable"] < 10 * target:
        await asyncio.sleep(0.005)
        if preempt_case and svc.binder.counters["bound"] + svc.binder.counters["unschedulable"] == 0:
            continue
    await svc.store.flush()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if PROFILER is not None:
        PROFILER.disable()
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    await svc.binder.cancel_all()
    writes = svc.store.revision - writes0
    await svc.store.aclose()
    c = svc.binder.counters
    rate = c["bound"] / elapsed
    text = (f"{c['bound']:,} bound of {target:,} in {elapsed:.2f} s wall ({cpu:.2f} s cpu): {rate:,.0f} pods/s, "
            f"{writes:,} store writes ({writes / elapsed:,.0f}/s), victims {c['victims']}")
    return rate, text


def service(nodes: int, pods: int, bound: int, store: str, preempt_case: bool = False) -> float:
    rate, text = asyncio.run(_service_case(nodes, pods, bound, store, preempt_case))
    print(f"  {nodes} nodes, store {store}: {text}", flush=True)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (smoke test)")
    ap.add_argument("--no-gc-freeze", action="store_true", help="leave the heap unfrozen")
    args = ap.parse_args()
    global FREEZE
    FREEZE = not args.no_gc_freeze
    # the scheduler's info logs rendered as in production (JSON), into /dev/null
    import structlog

    from nodeagent.daemonkit.logsetup import configure_logging
    configure_logging("info", "json")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=open(os.devnull, "w")))  # noqa: SIM115 - for the whole run
    scale = 10 if args.quick else 1
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, gc.freeze {FREEZE}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("plain:")
    headline = plain(5000, 10000 // scale, 1000 // scale)
    print("preemption:")
    preemption(5000, 3000 // scale)
    print("service (binder + state + store writes per bind + bind tasks; agents answer at once):")
    service(5000, 10000 // scale, 1000 // scale, "memory")
    store_rate = service(5000, 10000 // scale, 1000 // scale, "normal")
    service(5000, 10000 // scale, 1000 // scale, "full")
    service(5000, 10000 // scale, 1000 // scale, "thread-normal")
    print("service preemption (5000 nodes x 8 low-priority pods, high-priority stream):")
    service(5000, 3000 // scale, 0, "memory", preempt_case=True)
    preempt_rate = service(5000, 3000 // scale, 0, "normal", preempt_case=True)
    service(5000, 3000 // scale, 0, "thread-normal", preempt_case=True)
    print("scale:")
    for n in (500, 5000, 15000):
        plain(n, 10000 // scale, 1000 // scale, seed=3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"max RSS: {rss:.0f} MiB")
    print(f"with the store's writes (service path, SQLite storeSync normal): {store_rate:.0f} pods/s, "
          f"preemption {preempt_rate:.0f} pods/s")
    print(f"pods/s: {headline:.0f}")


if __name__ == "__main__":
    main()
