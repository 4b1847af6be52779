"""The control plane's Store: durable throughput, what the writes cost the event loop, watch latency, RSS.

Cases (each SQLite case on a fresh database under --dir, WAL with synchronous=FULL):
  throughput  16 concurrent writers creating ~2 KiB objects (CAS on create_revision = 0) for
              --seconds: durable txns/s, average batch (txns per commit = per fsync), txn latency
              p50/p99, CPU per txn of the event-loop thread and of the whole store (the log
              writer's process included); for the memory store, the thread and the process writer.
  loop        the cost of the writes to the rest of the event loop: a CPU-bound task on the loop
              (JSON encode/decode of a 2 KiB object, standing in for API request handling) runs
              beside 16 writers paced at --paced txns/s; prints the task's work/s with no writes,
              with the thread writer and with the process writer, the loop time each txn took
              from it (work lost / txns), and the txn latency under it.
  busy        one writer's sequential txns with the loop idle, then CPU-bound in 1 ms slices:
              the latency a writer thread adds when it must take the GIL back from a busy loop.
  watch       100 watchers of one prefix, creates submitted at 500/s (not waiting for each other):
              latency from the submit to each watcher's receipt (includes the commit, one fsync),
              and from the commit (the moment the store publishes it) to each receipt (the
              fan-out), p50/p99.
  rss         resident memory of a fresh process holding 10,000 objects of ~2 KiB in the store:
              after the creates and after a reopen (which also gives the open time); with the
              process writer, the writer process's RSS is counted in.
Prints figures; never asserts. Targets above the store (issue 13): >= 2000 creates/s through the
whole API from 16 clients, watch p99 <= 20 ms at 500 writes/s, server RSS <= 300 MiB with 10,000 pods.

    .venv/bin/python bench/storage_bench.py [--quick] [--case throughput,loop,busy,watch,rss] [--dir DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
import structlog

from nodeagent.cluster.storage.interface import Compare, Put, Store
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore

WRITERS = 16


def pod(i: int, size: int = 2048) -> bytes:
    """A pod-like JSON object of about `size` bytes."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"pod-{i:06d}", "namespace": "default", "uid": f"{i:032x}",
                                        "labels": {"app": "bench", "n": str(i)}},
                           "spec": {"nodeName": f"node-{i % 100}", "containers": [{"name": "c", "image": "x"}]},
                           "status": {"phase": "Running"}}
    pad = size - len(json.dumps(obj))
    obj["metadata"]["annotations"] = {"pad": "x" * max(0, pad - 30)}
    return json.dumps(obj, separators=(",", ":")).encode()


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


async def open_store(kind: str, path: str) -> Store:
    if kind == "memory":
        return MemoryStore()
    if os.path.exists(path):
        os.unlink(path)
    for suffix in ("-wal", "-shm", ".lock"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return await SqliteStore.open(path, writer=kind)  # type: ignore[arg-type]


def child_cpu() -> float:
    return sum(c.cpu_times().user + c.cpu_times().system for c in psutil.Process().children(recursive=True))


async def throughput(kind: str, path: str, seconds: float) -> float:
    store = await open_store(kind, path)
    value = pod(0)
    latencies: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def writer(w: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < stop:
            key = f"/registry/pods/default/w{w}-{i}"
            t0 = time.perf_counter()
            r = await store.txn([Compare(key, "create_revision", "=", 0)], [Put(key, value)])
            latencies.append(time.perf_counter() - t0)
            assert r.succeeded
            done += 1
            i += 1

    proc = psutil.Process()
    cpu0, loop0, child0, t0 = sum(proc.cpu_times()[:2]), time.thread_time(), child_cpu(), time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    wall = time.perf_counter() - t0
    cpu = sum(proc.cpu_times()[:2]) - cpu0 + child_cpu() - child0
    loop_cpu = time.thread_time() - loop0
    batch = ""
    if isinstance(store, SqliteStore):
        batch = f"  avg batch {store.batched_txns / max(1, store.batches):5.1f} txns/commit"
    print(f"  {kind:8s} {done / wall:8.0f} txns/s{batch}  latency p50 {pct(latencies, 50) * 1e3:5.2f} ms "
          f"p99 {pct(latencies, 99) * 1e3:5.2f} ms  CPU/txn: loop thread {loop_cpu / done * 1e6:4.0f} us, "
          f"all {cpu / done * 1e6:4.0f} us")
    await store.close()
    return done / wall


async def loop_cost(kind: str | None, path: str, seconds: float, paced: int, baseline: float) -> float:
    """Work/s of a CPU-bound task on the loop while 16 writers commit `paced` txns/s in total."""
    store = await open_store(kind, path) if kind else None
    doc = json.loads(pod(0))
    work = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def busy() -> None:
        nonlocal work
        while time.perf_counter() < stop:
            t_end = time.perf_counter() + 0.001  # ~1 ms slices, as request handlers would take
            while time.perf_counter() < t_end:
                json.loads(json.dumps(doc))
                work += 1
            await asyncio.sleep(0)

    async def writer(w: int) -> None:
        assert store is not None
        period = WRITERS / paced
        next_t, i = time.perf_counter(), 0
        value = pod(w)
        while time.perf_counter() < stop:
            next_t += period
            t0 = time.perf_counter()
            await store.txn([], [Put(f"/registry/pods/default/w{w}-{i % 100}", value)])
            latencies.append(time.perf_counter() - t0)
            i += 1
            await asyncio.sleep(max(0.0, next_t - time.perf_counter()))

    tasks = [busy()] + ([writer(w) for w in range(WRITERS)] if store else [])
    await asyncio.gather(*tasks)
    label = kind or "no store"
    extra = ""
    if latencies and baseline:
        rate = len(latencies) / seconds
        lost = max(0.0, 1 - work / seconds / baseline)  # share of the loop's time the writes took
        extra = (f"  {rate:6.0f} txns/s, loop time per txn {lost / rate * 1e6:4.0f} us, "
                 f"latency p50 {pct(latencies, 50) * 1e3:5.2f} ms p99 {pct(latencies, 99) * 1e3:6.2f} ms")
    print(f"  {label:8s} loop work {work / seconds:8.0f} /s{extra}")
    if store:
        await store.close()
    if latencies:
        LOOP_FIGURES.setdefault(label, []).append((len(latencies) / seconds, pct(latencies, 99)))
    return work / seconds


LOOP_FIGURES: dict[str, list[tuple[float, float]]] = {}


async def busy_latency(kind: str, path: str, seconds: float, busy: bool) -> None:
    """One writer's sequential txn latency while the loop is (or is not) CPU-bound in 1 ms slices:
    a writer thread must take the GIL back from the loop thread several times per commit."""
    store = await open_store(kind, path)
    doc = json.loads(pod(0))
    value = pod(1)
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def spin() -> None:
        while time.perf_counter() < stop:
            t_end = time.perf_counter() + 0.001
            while time.perf_counter() < t_end:
                json.loads(json.dumps(doc))
            await asyncio.sleep(0)

    async def writer() -> None:
        i = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await store.txn([], [Put(f"/k{i % 100}", value)])
            latencies.append(time.perf_counter() - t0)
            i += 1

    await asyncio.gather(writer(), *([spin()] if busy else []))
    print(f"  {kind:8s} loop {'busy' if busy else 'idle'}: {len(latencies) / seconds:6.0f} txns/s, "
          f"latency p50 {pct(latencies, 50) * 1e3:5.2f} ms p99 {pct(latencies, 99) * 1e3:6.2f} ms")
    await store.close()


async def watch_latency(kind: str, path: str, seconds: float, watchers: int = 100, rate: int = 500) -> None:
    """Writes are submitted on a 500/s schedule without waiting for each other (as API clients
    do), so a slow commit delays its batch, not the schedule."""
    store = await open_store(kind, path)
    total = int(seconds * rate)
    submit = [0.0] * total
    published: dict[int, float] = {}
    from_submit: list[float] = []
    from_publish: list[float] = []
    mvcc = store._mvcc  # type: ignore[attr-defined]
    publish = mvcc.publish

    def timed_publish(batches: Any) -> None:  # the moment the commit is durable and shown
        now = time.perf_counter()
        for i in range(len(batches)):
            published[mvcc.revision + 1 + i] = now
        publish(batches)

    mvcc.publish = timed_publish
    prefix = "/registry/pods/default/p"

    async def watcher() -> None:
        seen = 0
        async for ev in store.watch("/registry/pods/", 1):
            now = time.perf_counter()
            from_submit.append(now - submit[int(ev.kv.key[len(prefix):])])
            from_publish.append(now - published[ev.kv.mod_revision])
            seen += 1
            if seen == total:
                return

    value = pod(0)
    tasks = [asyncio.ensure_future(watcher()) for _ in range(watchers)]
    writes = []
    await asyncio.sleep(0.05)
    t0 = next_t = time.perf_counter()
    for i in range(total):
        submit[i] = time.perf_counter()
        writes.append(asyncio.ensure_future(store.txn([], [Put(f"{prefix}{i}", value)])))
        next_t += 1 / rate
        await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
    await asyncio.gather(*writes)
    wall = time.perf_counter() - t0
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    batch = ""
    if isinstance(store, SqliteStore):
        batch = f", {store.batched_txns / max(1, store.batches):.1f} txns/commit"
    print(f"  {kind:8s} {watchers} watchers, {total / wall:4.0f} writes/s{batch}: submit->watcher p50 "
          f"{pct(from_submit, 50) * 1e3:5.2f} ms p99 {pct(from_submit, 99) * 1e3:5.2f} ms; "
          f"commit->watcher p50 {pct(from_publish, 50) * 1e3:5.2f} ms p99 {pct(from_publish, 99) * 1e3:5.2f} ms")
    await store.close()


RSS_CHILD = r"""
import asyncio, os, sys, time, psutil
sys.path.insert(0, sys.argv[1])
import structlog, logging
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
from bench.storage_bench import pod
from nodeagent.cluster.storage.interface import Put
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore
kind, path, n, mode = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def rss(): return sum(p.memory_info().rss for p in [psutil.Process(), *psutil.Process().children()]) / 2**20
async def main():
    base = rss()
    t0 = time.perf_counter()
    store = MemoryStore() if kind == "memory" else await SqliteStore.open(path, writer=kind)
    opened = time.perf_counter() - t0
    if mode == "create":
        for i in range(0, n, 100):
            await asyncio.gather(*(store.txn([], [Put(f"/registry/pods/default/pod-{j:06d}", pod(j))])
                                   for j in range(i, min(n, i + 100))))
    keys = (await store.range("/registry/pods/", limit=1)).count
    print(f"{base:.1f} {rss():.1f} {opened:.3f} {keys}")
    await store.close()
asyncio.run(main())
"""


def rss_case(kind: str, path: str, n: int) -> None:
    root = str(Path(__file__).resolve().parent.parent)
    if kind != "memory":
        for suffix in ("", "-wal", "-shm", ".lock"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    out = subprocess.run([sys.executable, "-c", RSS_CHILD, root, kind, path, str(n), "create"],
                         capture_output=True, text=True, check=True).stdout.split()
    base, full, _, keys = float(out[0]), float(out[1]), out[2], int(out[3])
    line = f"  {kind:8s} {keys} objects: RSS {full:6.1f} MiB ({full - base:5.1f} MiB over the bare process {base:.1f})"
    if kind != "memory":
        out = subprocess.run([sys.executable, "-c", RSS_CHILD, root, kind, path, str(n), "reopen"],
                             capture_output=True, text=True, check=True).stdout.split()
        line += f"; after reopen {float(out[1]):6.1f} MiB, open took {float(out[2]) * 1e3:.0f} ms"
    print(line)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--case", default="throughput,loop,busy,watch,rss")
    ap.add_argument("--dir", default=None, help="where the databases go (default: a temp dir on /var/tmp)")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--paced", type=int, default=2000, help="txns/s of the loop case")
    ap.add_argument("--repeat", type=int, default=1, help="runs of the throughput and loop cases, interleaved")
    args = ap.parse_args()
    import logging
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    seconds = args.seconds or (1.5 if args.quick else 5.0)
    cases = args.case.split(",")
    tmp = args.dir or tempfile.mkdtemp(prefix="storage-bench-", dir="/var/tmp")
    path = os.path.join(tmp, "bench.db")
    print(f"storage bench: {psutil.cpu_count()} CPUs, databases in {tmp}, {seconds:.1f} s per run")
    try:
        if "throughput" in cases:
            print(f"throughput: {WRITERS} concurrent writers, ~2 KiB creates, durable (fsync per commit)")
            rates: dict[str, list[float]] = {}
            for _ in range(args.repeat):  # interleaved, so a busy neighbour hits every kind alike
                for kind in ("memory", "thread", "process"):
                    rates.setdefault(kind, []).append(await throughput(kind, path, seconds))
            if args.repeat > 1:
                print("  median: " + ", ".join(f"{k} {pct(v, 50):.0f} txns/s" for k, v in rates.items()))
        if "loop" in cases:
            print(f"loop: a CPU-bound task on the event loop beside {WRITERS} writers paced at {args.paced} txns/s")
            for _ in range(args.repeat):
                baseline = await loop_cost(None, path, seconds, args.paced, 0.0)
                for lkind in ("thread", "process"):
                    await loop_cost(lkind, path, seconds, args.paced, baseline)
            if args.repeat > 1:
                print("  median: " + ", ".join(
                    f"{k} {pct([r for r, _ in v], 50):.0f} txns/s p99 {pct([q for _, q in v], 50) * 1e3:.1f} ms"
                    for k, v in LOOP_FIGURES.items()))
        if "busy" in cases:
            print("busy: one writer's sequential txns, the event loop idle or CPU-bound in 1 ms slices")
            for _ in range(args.repeat):
                for kind in ("thread", "process"):
                    for busy in (False, True):
                        await busy_latency(kind, path, seconds, busy)
        if "watch" in cases:
            print("watch: 100 watchers of /registry/pods/, creates submitted at 500/s")
            for kind in ("memory", "thread", "process"):
                await watch_latency(kind, path, seconds)
        if "rss" in cases:
            n = 2000 if args.quick else 10_000
            print(f"rss: {n} objects of ~2 KiB in a fresh process")
            for kind in ("memory", "thread", "process"):
                rss_case(kind, path, n)
    finally:
        if args.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
