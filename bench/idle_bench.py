"""Idle cost of a real agent process holding running pods: CPU (utime+stime deltas of
/proc/<agent>/stat, all threads) and memory (VmRSS) while nothing happens. Prints figures; asserts
nothing.

Starts an agent (own stateDir and cgroup root, see agent_proc.py), creates --pods pods running
`sleep 100000` (POSTed --concurrency at a time), waits until every one reports a containerID,
lets it settle (--settle s: checkpoint writes, first housekeeping), then samples once a second for
--seconds. With --empty-seconds > 0 the same agent is first measured with no pods.

    .venv/bin/python bench/idle_bench.py [--pods 100] [--seconds 60]
    integration/run-in-uml.sh sh -c 'ip link set lo up && .venv/bin/python bench/idle_bench.py --seconds 30'
Targets: CPU <= 1% of one core idle, well under 5% with --probe (issue 11); RSS <= 50 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_proc import AgentProc, MachineLoad, container_id_of, parse_env, proc_times, vm_rss

NS = "bench"
MiB = 1 << 20


def probe_spec(kind: str, port: int) -> dict[str, Any] | None:
    """A liveness probe every second (kind none: no probe). The HTTP and TCP probes target one
    server the bench runs on loopback, so what is measured is the agent's side of a probe."""
    action: dict[str, Any] | None = {
        "none": None,
        "exec": {"exec": {"command": ["true"]}},
        "http": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/healthz"}},
        "tcp": {"tcpSocket": {"host": "127.0.0.1", "port": port}},
    }[kind]
    if action is None:
        return None
    return {**action, "periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 3}


def manifest(name: str, probe: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c", "command": ["sleep", "100000"],
        "resources": {"requests": {"cpu": "5m", "memory": "4Mi"}, "limits": {"cpu": "100m", "memory": "16Mi"}},
    }
    if probe is not None:
        container["livenessProbe"] = probe
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]}}


def start_probe_target() -> tuple[subprocess.Popen[bytes], int]:
    """An HTTP server on loopback in a process of its own (its CPU is not the agent's). Its listen
    backlog is 1024: with socketserver's default of 5, the 100 probes the agent starts in one
    100 ms window overflow it, the kernel drops their SYNs, the retry comes 1 s later, after the
    probe's timeout, and containers are restarted for failed liveness (90 restarts in 20 s were
    measured that way: the agent's restarts, not its probes)."""
    code = ("import http.server, socketserver, sys\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers()\n"
            "        self.wfile.write(b'ok')\n"
            "    def log_message(self, *a): pass\n"
            "socketserver.ThreadingTCPServer.request_queue_size = 1024\n"
            "s = socketserver.ThreadingTCPServer(('127.0.0.1', 0), H)\n"
            "print(s.server_address[1], flush=True)\n"
            "s.serve_forever()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


async def create_pods(agent: AgentProc, n: int, concurrency: int, probe: dict[str, Any] | None = None) -> float:
    """POST n pods, `concurrency` in flight; wait until all have a containerID; seconds taken."""
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=agent.headers) as session:
        async def one(i: int) -> None:
            url, body = f"{agent.url}/api/v1/namespaces/{NS}/pods", manifest(f"idle-{i}", probe)
            async with sem, session.post(url, json=body) as r:
                body = await r.json()
                if r.status != 201:
                    raise RuntimeError(f"POST idle-{i}: {r.status} {body.get('message')}")

        await asyncio.gather(*(one(i) for i in range(n)))
        deadline = time.monotonic() + 60
        while True:
            async with session.get(f"{agent.url}/api/v1/pods") as r:
                items = (await r.json())["items"]
            running = [p for p in items if p["status"].get("phase") == "Running" and container_id_of(p)]
            if len(running) == n:
                return time.perf_counter() - t0
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(running)}/{n} pods running after 60 s")
            await asyncio.sleep(0.1)


def restarts(agent: AgentProc) -> int:
    """Container restarts over every pod (a failing liveness probe restarts its container: a
    window with restarts measures those, not the probes)."""
    items = agent.request("GET", "/api/v1/pods")["items"]
    return sum(cs.get("restartCount", 0) for p in items for cs in p["status"].get("containerStatuses") or [])


def measure(agent: AgentProc, seconds: float, label: str, probes_per_s: float = 0.0) -> None:
    """Sample CPU and RSS once a second for `seconds`; print the totals and the spread. With
    probes, also the agent's CPU per probe (the machine's load moves it less than the % of a core)
    and the container restarts during the window."""
    pid = agent.pid
    restarted = restarts(agent)
    load = MachineLoad()
    u0, s0 = proc_times(pid)
    w0 = time.monotonic()
    rss: list[int] = []
    per_s: list[float] = []
    last = u0 + s0
    next_t = w0
    while True:
        next_t += 1.0
        time.sleep(max(0.0, min(next_t, w0 + seconds) - time.monotonic()))
        u, s = proc_times(pid)
        per_s.append(u + s - last)
        last = u + s
        rss.append(vm_rss(pid)[0])
        if time.monotonic() >= w0 + seconds - 1e-3:
            break
    u1, s1 = proc_times(pid)
    wall = time.monotonic() - w0
    cpu = (u1 - u0) + (s1 - s0)
    _, hwm = vm_rss(pid)
    busiest = max(per_s) if per_s else 0.0
    print(f"\n== {label}: {wall:.1f} s")
    print(f"agent CPU   {cpu * 1e3:8.1f} ms  = {cpu / wall * 100:6.3f}% of one core"
          f"  (user {(u1 - u0) * 1e3:.0f} ms, system {(s1 - s0) * 1e3:.0f} ms;"
          f" busiest 1-s sample {busiest * 1e3:.0f} ms)")
    print(f"agent RSS   now {rss[-1] / MiB:6.1f} MiB  min {min(rss) / MiB:6.1f}  max {max(rss) / MiB:6.1f}"
          f"  peak (VmHWM) {hwm / MiB:6.1f} MiB; threads {threads(pid)}")
    if probes_per_s:
        probes = probes_per_s * wall
        print(f"probes      ~{probes:.0f} in the window: agent CPU {cpu / probes * 1e6:.0f} us per probe;"
              f" container restarts {restarts(agent) - restarted}")
    print(load.text(cpu))
    cpu_target = ("CPU well under 5% with 1 s probes: "  # issue 11; "well under" is the reader's call
                  f"{cpu / wall * 100:.2f}%") if probes_per_s else \
        f"CPU <= 1%: {'MET' if cpu / wall <= 0.01 else 'MISSED'}"
    print(f"target {cpu_target}; target RSS <= 50 MiB: {'MET' if max(rss) <= 50 * MiB else 'MISSED'}")


def start_py_spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """`py-spy record` at 1000 Hz, non-blocking (idle samples left out) into `out`, collapsed stacks."""
    exe = shutil.which("py-spy", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        raise SystemExit("--py-spy: no py-spy (pip install py-spy into the venv)")
    proc = subprocess.Popen([exe, "record", "-p", str(pid), "-r", "1000", "--nonblocking", "-f", "raw", "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attach
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the measured window")
    ap.add_argument("--settle", type=float, default=5.0, help="wait after the pods run, before measuring")
    ap.add_argument("--empty-seconds", type=float, default=0.0, help="first measure with no pods this long")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--probe", default="none", choices=["none", "exec", "http", "tcp"],
                    help="give every pod a liveness probe of this kind every 1 s")
    ap.add_argument("--py-spy", metavar="FILE", help="record the agent with py-spy during the window")
    ap.add_argument("--driver", default="auto", choices=["auto", "v1", "v2"])
    ap.add_argument("--agent-log", metavar="FILE", help="keep the agent's log (JSON lines) in FILE")
    ap.add_argument("--agent-env", action="append", metavar="KEY=VALUE",
                    help="extra environment for the agent (repeatable), e.g. PYTHONPATH=/tmp/patched-tree")
    opts = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the agent writes cgroupfs")
    agent = AgentProc(driver_kind=opts.driver, env=parse_env(opts.agent_env), keep_log=opts.agent_log)
    target, port = start_probe_target() if opts.probe in ("http", "tcp") else (None, 0)
    agent.start()
    try:
        print(f"host: {platform.node()} kernel {platform.release()}, {os.cpu_count()} CPUs, cgroup v{agent.version};"
              f" agent pid {agent.pid}, root {agent.root}; housekeeping every 10 s (the default)")
        print(f"agent RSS after start: {vm_rss(agent.pid)[0] / MiB:.1f} MiB")
        if opts.empty_seconds > 0:
            measure(agent, opts.empty_seconds, "no pods")
        took = asyncio.run(create_pods(agent, opts.pods, opts.concurrency, probe_spec(opts.probe, port)))
        print(f"\n{opts.pods} pods running after {took:.2f} s; agent RSS {vm_rss(agent.pid)[0] / MiB:.1f} MiB;"
              f" settling {opts.settle:.0f} s; probes: {opts.probe} every 1 s")
        time.sleep(opts.settle)
        spy = start_py_spy(agent.pid, opts.py_spy) if opts.py_spy else None
        try:
            label = f"{opts.pods} running pods, idle" if opts.probe == "none" else \
                f"{opts.pods} running pods, one {opts.probe} liveness probe each every 1 s"
            measure(agent, opts.seconds, label, 0.0 if opts.probe == "none" else float(opts.pods))
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
    finally:
        agent.stop()
        if target is not None:
            target.kill()
            target.wait()


if __name__ == "__main__":
    main()
