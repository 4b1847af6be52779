"""CPU cost to the agent of running probes: N pods, each with one probe every periodSeconds.

The prober here is the agent's own code (nodeagent.agent.probes.PodProbes with its real runners
and executors) in this process, with the pods' containers reported Running. The targets run in
a separate process (an aiohttp HTTP server, which also takes the TCP connects, and grpcio's
reference health server), so their CPU is not counted; exec probes run `/bin/true` through the
spawn shim inside a cgroup per pod that this bench creates under its own root (as root; without
root they run without a cgroup and the bench says so) and removes afterwards.

Figures per scenario: this process's CPU (utime+stime of all its threads, /proc/self/stat) as a
percentage of one core, probes per second actually run, the probe processes' own CPU (exec
probes: shim + command, reaped children: in a real pod it is charged to the container's cgroup,
not the agent), and VmRSS. Prints figures; asserts nothing.

    .venv/bin/python bench/probe_bench.py [--pods 100] [--seconds 20] [--period 1] [--kinds exec,http,tcp,grpc,mixed]
        [--coalesce-ms 25,0] [--loop asyncio,uvloop] [--repeat 1]

Every pod's first probe falls at a random point of the first period (seeded), as pods created at
different times are phased. --coalesce-ms and --loop take lists: each combination is run in turn
(interleaved, --repeat times), so an A/B sees the same machine; `--coalesce-ms 0` is a timer per
probe wake-up (no coalescing); uvloop must be installed for --loop uvloop.
Target: well under 5% of one core for 100 pods with 1 s probes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import resource
import secrets
import socket
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_proc import MachineLoad, proc_times, vm_rss

from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.probes.http_probe import HttpProber
from nodeagent.agent.probes.pod_probes import PodProbes, ProbeContext
from nodeagent.agent.probes.runner import coalescing_timer
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.state import ContainerStatus, Running
from nodeagent.core.clock import SystemClock
from nodeagent.core.model import parse_pod

MiB = 1 << 20


def serve(http_port: int, grpc_port: int) -> None:
    """The probe targets, in their own process."""
    from concurrent import futures

    import grpc
    from aiohttp import web
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", ok)
    web.run_app(app, host="127.0.0.1", port=http_port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"probe target on port {port} did not come up")


def probe_spec(kind: str, period: int, http_port: int, grpc_port: int) -> dict[str, Any]:
    timing = {"periodSeconds": period, "timeoutSeconds": 1}
    if kind == "exec":
        return {"exec": {"command": ["/bin/true"]}, **timing}
    if kind == "http":
        return {"httpGet": {"path": "/healthz", "port": http_port}, **timing}
    if kind == "tcp":
        return {"tcpSocket": {"port": http_port}, **timing}
    return {"grpc": {"port": grpc_port}, **timing}


def pod(i: int, kind: str, period: int, http_port: int, grpc_port: int) -> Any:
    container: dict[str, Any] = {"name": "c", "command": ["sleep", "inf"]}
    if kind == "mixed":  # one of each: exec liveness, http readiness, tcp startup
        container["livenessProbe"] = probe_spec("exec", period, http_port, grpc_port)
        container["readinessProbe"] = probe_spec("http", period, http_port, grpc_port)
        container["startupProbe"] = {**probe_spec("tcp", period, http_port, grpc_port), "failureThreshold": 1}
    else:
        container["readinessProbe"] = probe_spec(kind, period, http_port, grpc_port)
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "bench"},
                      "spec": {"containers": [container]}})


async def scenario(kind: str, n: int, seconds: float, period: int, http_port: int, grpc_port: int,
                   driver: Any, coalesce_ms: float) -> dict[str, float]:
    clock = SystemClock()
    timer = coalescing_timer(coalesce_ms / 1000)
    spread = random.Random(1)
    http = HttpProber()
    probes: list[PodProbes] = []
    tasks: list[asyncio.Task[None]] = []
    events = 0
    for i in range(n):
        p = pod(i, kind, period, http_port, grpc_port)
        cg = None
        if driver is not None:
            path = f"bench/p{i}/c"
            driver.create(path, _spec())
            cg = DriverCgroup(driver, path)
        target = ExecTarget(cgroup=cg, env={"PATH": "/usr/bin:/bin"})
        status = ContainerStatus("c", Running(clock.wall() - 3600), container_id=f"bench://{i}")

        def on_event(c: str, e: Any) -> None:
            nonlocal events
            events += 1

        pp = PodProbes(p, ProbeContext(http, exec_target=lambda name, t=target: t),
                       status=lambda name, s=status: s, deleting=lambda: False, on_event=on_event,
                       on_kill=lambda c, m, g: None, on_change=lambda: None, clock=clock,
                       timer=timer, spread=spread)
        probes.append(pp)
    warmup = max(float(period), min(3.0, seconds / 4))
    for pp in probes:
        pp.start(lambda coro, name: tasks.append(asyncio.ensure_future(coro)) or tasks[-1])
    await asyncio.sleep(warmup)
    attempts0 = sum(r.attempts for pp in probes for r in pp.runners.values())
    u0, s0 = proc_times(os.getpid())
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    t1 = time.monotonic()
    u1, s1 = proc_times(os.getpid())
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    attempts1 = sum(r.attempts for pp in probes for r in pp.runners.values())
    rss, hwm = vm_rss(os.getpid())
    for pp in probes:
        await pp.stop()
    await http.close()
    if driver is not None:
        for i in range(n):
            driver.kill(f"bench/p{i}")
            driver.remove(f"bench/p{i}")
    wall = t1 - t0
    children = (ch1.ru_utime - ch0.ru_utime) + (ch1.ru_stime - ch0.ru_stime)
    ready = sum(pp.ready("c") for pp in probes)
    return {"cpu_pct": (u1 - u0 + s1 - s0) / wall * 100, "user_pct": (u1 - u0) / wall * 100,
            "probes_per_s": (attempts1 - attempts0) / wall,
            "children_pct": children / wall * 100, "rss_mib": rss / MiB, "hwm_mib": hwm / MiB,
            "ready": ready, "events": events}


def _spec() -> Any:
    from nodeagent.agent.cgroups.driver import CgroupSpec

    return CgroupSpec(memory_max=64 * MiB)


def _loop_factory(name: str) -> Any:
    if name == "uvloop":
        import uvloop  # type: ignore[import-not-found]  # not a dependency: installed by hand for the A/B

        return uvloop.new_event_loop
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--period", type=int, default=1)
    ap.add_argument("--kinds", default="exec,http,tcp,grpc,mixed")
    ap.add_argument("--coalesce-ms", default="25", help="probe wake-up grid(s), comma-separated; 0: none")
    ap.add_argument("--loop", default="asyncio", help="event loop(s): asyncio, uvloop; comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="run every combination this many times, interleaved")
    ap.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    http_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(http_port), str(grpc_port)])
    driver = None
    root = f"/nodeagent-bench-{secrets.token_hex(3)}"
    try:
        wait_port(http_port)
        wait_port(grpc_port)
        if os.geteuid() == 0:
            from nodeagent.agent.cgroups.detect import make_driver

            driver = make_driver("auto", root)
        where = f"in a cgroup per pod (cgroup v{driver.version})" if driver else "without cgroups (not root)"
        print(f"probe_bench: {args.pods} pods, period {args.period} s, {args.seconds:.0f} s per scenario; "
              f"Python {platform.python_version()}, kernel {platform.release()}, exec probes {where}")
        print(f"{'probes':>8} {'loop':>8} {'grid ms':>7} {'probes/s':>9} {'agent CPU':>10} {'(user)':>7} "
              f"{'probe procs':>12} {'RSS MiB':>8} {'ready':>6} {'events':>7}")
        combos = [(kind, loop, float(ms)) for _ in range(args.repeat) for kind in args.kinds.split(",")
                  for loop in args.loop.split(",") for ms in args.coalesce_ms.split(",")]
        for kind, loop, ms in combos:
            load = MachineLoad()
            coro = scenario(kind, args.pods, args.seconds, args.period, http_port, grpc_port, driver, ms)
            with asyncio.Runner(loop_factory=_loop_factory(loop)) as runner:
                r = runner.run(coro)
            print(f"{kind:>8} {loop:>8} {ms:7.0f} {r['probes_per_s']:9.1f} {r['cpu_pct']:9.2f}% "
                  f"{r['user_pct']:6.2f}% {r['children_pct']:11.2f}% {r['rss_mib']:8.1f} {r['ready']:6d} "
                  f"{r['events']:7d}")
            print(f"{'':>8} {load.text()}")
        print("agent CPU: this process, % of one core; probe procs: the exec'd shim+command (a container's "
              "cost, not the agent's); ready: pods whose readiness probe passed at the end")
    finally:
        server.terminate()
        server.wait(timeout=10)
        if driver is not None:
            driver.kill("")
            driver.remove("")


if __name__ == "__main__":
    main()
