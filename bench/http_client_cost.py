"""CPU per httpGet probe: the agent's client (httptools over a raw socket) against aiohttp's
ClientSession (one session, no keep-alive, as the kubelet's transport). Same server (a separate
process), same loop, rounds interleaved so machine load hits both alike. Prints figures.

    .venv/bin/python bench/http_client_cost.py [--requests 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import aiohttp
from agent_proc import MachineLoad, proc_times
from probe_bench import free_port, wait_port

from nodeagent.agent.probes.http_probe import HttpProber, probe_url, request_headers


async def cpu_per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(20):
        await fn()
    u0, s0 = proc_times(os.getpid())
    for _ in range(n):
        await fn()
    u1, s1 = proc_times(os.getpid())
    return (u1 - u0 + s1 - s0) / n * 1e6


async def main(n: int, rounds: int, port: int) -> None:
    prober = HttpProber()
    url = probe_url("HTTP", "127.0.0.1", port, "/healthz")
    headers, _ = request_headers([])
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=0))

    async def ours() -> None:
        out = await prober.probe(url, headers, None, 1.0)
        assert out.verdict.value == "success", out

    async def theirs() -> None:
        async with session.get(url, headers=headers, allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=1.0)) as resp:
            await resp.content.read(10 * 1024)
            assert resp.status == 200

    load = MachineLoad()
    rows: dict[str, list[float]] = {"agent (httptools)": [], "aiohttp ClientSession": []}
    for _ in range(rounds):
        rows["agent (httptools)"].append(await cpu_per_call(ours, n))
        rows["aiohttp ClientSession"].append(await cpu_per_call(theirs, n))
    await session.close()
    print(f"http_client_cost: {n} sequential GETs per round, {rounds} rounds, CPU of this process per request")
    for name, values in rows.items():
        shown = "  ".join(f"{v:6.0f} us" for v in values)
        print(f"  {name:24} {shown}   (at 100 probes/s: {min(values) / 100:.2f}% of a core, best round)")
    print(f"  {load.text()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    http_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "probe_bench.py"),
                               "--serve", str(http_port), str(grpc_port)])
    try:
        wait_port(http_port)
        asyncio.run(main(args.requests, args.rounds, http_port))
    finally:
        server.terminate()
        server.wait(timeout=10)
