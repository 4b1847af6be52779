"""Resident memory a gRPC health client adds to a Python process: grpcio (with the health
stubs and protobuf) against the h2-based client of nodeagent.agent.probes.grpc_probe.

Each case runs in a fresh interpreter that first imports aiohttp, the Pod model and the httpGet
prober (the agent holds them anyway), then the client, then makes one Health/Check call to a
reference server in another process, and prints VmRSS after the import and after the call.
Prints figures; asserts nothing.

    .venv/bin/python bench/grpc_client_rss.py
"""

from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_bench import free_port, wait_port

CASE = r"""
import asyncio, sys
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
import aiohttp
import nodeagent.agent.probes.http_probe, nodeagent.core.model  # what the agent holds anyway
base = rss()
port = int(sys.argv[2])
if sys.argv[1] == "grpcio":
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    imported = rss()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        ok = resp.status == health_pb2.HealthCheckResponse.SERVING
else:
    from nodeagent.agent.probes.grpc_probe import grpc_probe
    imported = rss()
    ok = asyncio.run(grpc_probe("127.0.0.1", port, None, 5.0)).output == "service healthy"
print(f"{sys.argv[1]:8} base {base:6.1f} MiB  +import {imported - base:5.1f} MiB  "
      f"+one call {rss() - base:5.1f} MiB  ok={ok}")
"""


def main() -> None:
    http_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "probe_bench.py"),
                               "--serve", str(http_port), str(grpc_port)])
    try:
        wait_port(grpc_port)
        print("grpc_client_rss: VmRSS of a fresh interpreter with the agent's other modules, "
              "then the client, then one call")
        for case in ("h2", "grpcio"):
            subprocess.run([sys.executable, "-c", CASE, case, str(grpc_port)], check=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
