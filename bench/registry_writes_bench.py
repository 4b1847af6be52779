"""CPU per write of the writes the scheduler makes, in process: the registry with the server's
plugins (field validation, field manager, patcher) over the MemoryStore, no HTTP, no SQLite, no
watchers. Each kind runs N times in a row; the figure is process CPU per write.

  pod create         GenericStore.create of the bench pod (no admission chain: the registry alone)
  status write       PodScheduled=False through pods/status (the scheduler's _status mutate)
  binding            pods/binding (registry/binding.py)
  Scheduled event    EventRecorder.event, written by its writers (PUT through the events store)

    .venv/bin/python bench/registry_writes_bench.py [--writes 2000] [--profile KIND]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.cluster.controlplane import plugins as server_plugins
from nodeagent.cluster.events.correlator import Correlator
from nodeagent.cluster.events.recorder import EventRecorder
from nodeagent.cluster.objects import set_condition
from nodeagent.cluster.registry.binding import bind
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock


def pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i:05d}", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "1d"],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


async def run(n: int, profile: str) -> None:
    clock = FakeClock()
    reg = Registry(MemoryStore(), clock, plugins=server_plugins(clock))
    await reg.ensure_system_namespaces()
    pods, events = reg.resource("", "v1", "pods"), reg.resource("", "v1", "events")
    ctx, sctx = Context(field_manager="bench"), Context(field_manager="default-scheduler")
    cond = {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Unschedulable",
            "message": "0/0 nodes are available"}

    def unschedulable(old: dict[str, Any]) -> dict[str, Any]:
        new = {**old, "status": dict(old.get("status") or {})}  # as Scheduler._status
        set_condition(new["status"], cond)
        return new

    recorder = EventRecorder(events, clock, "default-scheduler", correlator=Correlator())
    writer = asyncio.create_task(recorder.run())

    async def scheduled() -> None:
        for i in range(n):
            recorder.event(await pods.get("default", f"p-{i:05d}"), "Normal", "Scheduled",
                           f"Successfully assigned default/p-{i:05d} to n1")
        await recorder.flush()

    async def each(op: Callable[[int], Awaitable[Any]]) -> None:
        for i in range(n):
            await op(i)

    kinds: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("pod create", lambda: each(lambda i: pods.create("default", pod(i), ctx))),
        ("status write", lambda: each(lambda i: pods.guaranteed_update("default", f"p-{i:05d}", unschedulable, sctx,
                                                                       subresource="status"))),
        ("binding", lambda: each(lambda i: bind(pods, "default", f"p-{i:05d}",
                                                {"target": {"kind": "Node", "name": "n1"}}, sctx))),
        ("Scheduled event", scheduled),  # includes n GETs of the pods
    ]
    for name, body in kinds:
        prof = cProfile.Profile() if profile == name.split()[0] else None
        t = time.process_time()
        if prof is not None:
            prof.enable()
        await body()
        if prof is not None:
            prof.disable()
            prof.dump_stats(f"/tmp/registry_writes_{profile}.prof")
        print(f"  {name:18s} {(time.process_time() - t) / n * 1e6:7.1f} us CPU per write")
    writer.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--profile", default="", help="pod, status, binding or Scheduled: cProfile that kind to /tmp")
    args = ap.parse_args()
    asyncio.run(run(args.writes, args.profile))


if __name__ == "__main__":
    main()
