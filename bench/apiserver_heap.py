"""Where the API server's memory goes with N pods stored: the control plane in-process under
tracemalloc, N bench pods created through HTTP (apiserver_bench's pod), then the live Python heap
grouped by the line that allocated it, and the process's RSS before and after.

Usage: python bench/apiserver_heap.py [--pods N] [--top K] [--frames F]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from apiserver_bench import creates, rss_mib

from nodeagent.cluster.controlplane import ControlPlane
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.daemonkit.heap import trim_malloc


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--frames", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="apiserver-heap-"))
    config = parse_server_config({"port": 0, "storage": {"backend": "sqlite", "path": str(tmp / "state.db")}},
                                 "bench")
    cp = ControlPlane(config)
    started = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(cp.run(ready=started.set_result))
    port = await started
    import os
    gc.collect()
    trim_malloc()
    before = rss_mib(os.getpid())
    tracemalloc.start(args.frames)
    base = tracemalloc.take_snapshot()
    rate = await creates(f"http://127.0.0.1:{port}", args.pods, 16)
    await asyncio.sleep(3)  # the scheduler's and controllers' work after the creates
    async with aiohttp.ClientSession():
        pass
    gc.collect()
    trim_malloc()
    snap = tracemalloc.take_snapshot()
    after = rss_mib(os.getpid())
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{args.pods} pods at {rate:.0f}/s; RSS {before:.0f} -> {after:.0f} MiB (tracemalloc's own "
          f"overhead included); traced {traced / 2**20:.1f} MiB")
    stats = snap.compare_to(base, "traceback" if args.frames > 1 else "lineno")
    for st in stats[:args.top]:
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in st.traceback)
        print(f"{st.size_diff / 2**20:8.2f} MiB {st.count_diff:9d} blocks  {where}")
    cp.stop()
    await task


if __name__ == "__main__":
    asyncio.run(main())
