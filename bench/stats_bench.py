"""CPU cost of the agent's resource-metrics sampling: 1 s passes over 100 pods. Prints figures;
asserts nothing.

Makes its own cgroup root `/nodeagent-bench-<random>` with kubepods/burstable/pod<i>/c<j> for
--pods pods of --containers containers, each container holding one sleeping process and a log
file, then runs the agent's Sampler (nodeagent/agent/stats) as the agent does: its `run()` task on
an asyncio loop, each pass in a worker thread. Measured: the process's CPU time (all threads,
getrusage) over --seconds, as a share of one core; per-pass thread CPU; and, for comparison, the
same with no descriptors kept open (statsMaxOpenFiles 0: open/read/close each time), and what
rendering /metrics/resource and /stats/summary costs per scrape. Everything is removed after.

    .venv/bin/python bench/stats_bench.py [--pods 100] [--seconds 30] [--max-open-files N]
    integration/run-in-uml.sh .venv/bin/python bench/stats_bench.py --seconds 30
Target: <= 1% of one core for 1 s sampling with 100 pods.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_proc import MachineLoad, pct

from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.config.stats import StatsSettings
from nodeagent.agent.stats.prometheus import resource_metrics
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.agent.stats.summary import summary
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget
from nodeagent.agent.stats.values import Snapshot
from nodeagent.core.clock import SystemClock


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


Procs = list[subprocess.Popen[bytes]]


def build(driver: CgroupDriver, pods: int, containers: int, logs: str) -> tuple[list[PodTarget], Procs]:
    driver.create("kubepods", CgroupSpec())
    driver.create("kubepods/burstable", CgroupSpec())
    targets: list[PodTarget] = []
    procs: Procs = []
    now = time.time()
    for i in range(pods):
        pod = f"kubepods/burstable/podbench{i:04d}"
        driver.create(pod, CgroupSpec(cpu_shares=102))
        cts = []
        for j in range(containers):
            path = f"{pod}/c{j}"
            driver.create(path, CgroupSpec(cpu_shares=102, cpu_quota_us=10_000, memory_max=16 << 20))
            log_dir = os.path.join(logs, f"bench_p{i}_uid{i}", f"c{j}")
            os.makedirs(log_dir)
            with open(os.path.join(log_dir, "0.log"), "wb") as f:
                f.write(b"started\n" * 64)
            files = driver.procs_files(path)

            def join(files: list[str] = files) -> None:
                for name in files:
                    with open(name, "w") as fh:
                        fh.write(str(os.getpid()))

            procs.append(subprocess.Popen(["sleep", "100000"], preexec_fn=join))
            cts.append(ContainerTarget(f"c{j}", path, start_time=now, log_dir=log_dir, memory_limit=16 << 20))
        targets.append(PodTarget("bench", f"p{i}", f"uid{i}", pod, tuple(cts), start_time=now))
    return targets, procs


async def run_for(sampler: Sampler, seconds: float) -> tuple[float, float, int, list[float]]:
    """(CPU seconds, wall seconds, passes, each pass's wall time) of the sampler's run() task
    over `seconds`."""
    await asyncio.to_thread(lambda: None)  # the default executor's thread exists before we measure
    walls: list[float] = []
    real_sample = sampler.sample

    def timed(targets: list[PodTarget]) -> Snapshot:
        t0 = time.perf_counter()
        try:
            return real_sample(targets)
        finally:
            walls.append(time.perf_counter() - t0)

    sampler.sample = timed  # type: ignore[method-assign]
    task = asyncio.create_task(sampler.run())
    await asyncio.sleep(1.5)  # the first passes open the files; measure the steady state
    c0, w0, p0, n0 = cpu_seconds(), time.monotonic(), sampler.passes, len(walls)
    await asyncio.sleep(seconds)
    c1, w1, p1, n1 = cpu_seconds(), time.monotonic(), sampler.passes, len(walls)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    sampler.sample = real_sample  # type: ignore[method-assign]
    return c1 - c0, w1 - w0, p1 - p0, walls[n0:n1]


def pass_costs(sampler: Sampler, targets: list[PodTarget], n: int) -> tuple[list[float], float]:
    """Thread CPU of `n` direct passes back to back, after one that opens the files; and the
    files opened per pass among them (0 when every file is kept)."""
    sampler.sample(targets)
    opened = sampler.files_opened
    out = []
    for _ in range(n):
        t0 = time.thread_time()
        sampler.sample(targets)
        out.append(time.thread_time() - t0)
    return out, (sampler.files_opened - opened) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--containers", type=int, default=1, help="containers per pod")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--driver", default="auto", choices=["auto", "v1", "v2"])
    ap.add_argument("--max-open-files", type=int, default=None,
                    help="statsMaxOpenFiles for the first run (default: the agent's, half the soft RLIMIT_NOFILE)")
    opts = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark makes cgroups")
    root = f"/nodeagent-bench-{secrets.token_hex(4)}"
    driver = make_driver(opts.driver, root)
    logs = tempfile.mkdtemp(prefix="stats-bench-")
    procs: Procs = []
    try:
        targets, procs = build(driver, opts.pods, opts.containers, logs)
        cgroups = opts.pods * (1 + opts.containers) + 1
        settings = StatsSettings(interval=opts.interval, cpu_window=opts.interval)
        print(f"host: {platform.node()} kernel {platform.release()}, {os.cpu_count()} CPUs, cgroup v{driver.version};"
              f" {opts.pods} pods x {opts.containers} container(s) = {cgroups} cgroups read per pass (with kubepods);"
              f" interval {settings.interval} s, CPU window {settings.cpu_window} s, logs walked every"
              f" {settings.storage_interval} s")
        kept = "kept files (default budget)" if opts.max_open_files is None else \
            f"kept files (statsMaxOpenFiles {opts.max_open_files})"
        for label, budget in ((kept, opts.max_open_files), ("open/read/close each time (statsMaxOpenFiles 0)", 0)):
            s = StatsSettings(interval=opts.interval, cpu_window=opts.interval, max_open_files=budget)
            sampler = Sampler(driver, lambda: targets, SystemClock(), node_name="bench", nodefs_path=logs, settings=s)
            load = MachineLoad()
            cpu, wall, passes, pass_walls = asyncio.run(run_for(sampler, opts.seconds))
            costs, opens_per_pass = pass_costs(sampler, targets, 20)
            held = sampler.kept_files
            sampler.close()
            snap = sampler.latest
            assert snap is not None
            rates = [c.cpu.usage_nano_cores for p in snap.pods for c in p.containers
                     if c.cpu is not None and c.cpu.usage_nano_cores is not None]
            print(f"\n== {label}: {passes} passes in {wall:.1f} s")
            print(f"sampling CPU {cpu * 1e3:7.1f} ms = {cpu / wall * 100:.3f}% of one core"
                  f" (target <= 1%: {'MET' if cpu / wall <= 0.01 else 'MISSED'});"
                  f" wall time inside the passes {sum(pass_walls) * 1e3:.1f} ms = {sum(pass_walls) / wall * 100:.3f}%"
                  f" (pass median {statistics.median(pass_walls) * 1e3:.2f} ms)")
            print(f"one pass (thread CPU, warm, 20 passes): median {statistics.median(costs) * 1e3:.2f} ms,"
                  f" p90 {pct(costs, 0.9) * 1e3:.2f} ms, max {max(costs) * 1e3:.2f} ms;"
                  f" {held} descriptors kept, {opens_per_pass:.0f} files opened per pass (of {3 * cgroups + 2} read);"
                  f" {len(rates)}/{opts.pods * opts.containers} containers with a rate")
            print(load.text(cpu))
        snap = sampler.latest
        assert snap is not None
        for name, render in (("/metrics/resource", lambda: resource_metrics(snap).encode()),
                             ("/stats/summary", lambda: json.dumps(summary(snap)).encode())):
            render()
            times = []
            for _ in range(20):
                t0 = time.thread_time()
                body = render()
                times.append(time.thread_time() - t0)
            print(f"render {name}: median {statistics.median(times) * 1e3:.2f} ms per scrape,"
                  f" {len(body) / 1024:.0f} KiB")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        with contextlib.suppress(OSError):
            driver.kill("")
        driver.remove("")
        shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
