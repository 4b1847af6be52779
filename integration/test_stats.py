"""The resource-metrics sampler against a real kernel: v1 on the hybrid host, v2 in the UML guest.

Real processes burn CPU under a CFS quota and touch a known amount of memory in cgroups the test
creates under its own agent root; the sampler's figures are checked against the kernel's files,
read by the test itself (located from the documented layout, not through the driver) just
before and just after each pass: counters are bracketed exactly, rates and working sets agree
within 10%.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import cgroup_dirs, cgroup_file

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.config.stats import StatsSettings
from nodeagent.agent.node.machine import parse_cpu_busy_ns
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget
from nodeagent.agent.stats.values import ContainerStats, PodStats, Snapshot
from nodeagent.core.clock import SystemClock

MI = 1 << 20
POD = "kubepods/burstable/podstats1"
BURN = POD + "/burn"
MEM = POD + "/mem"
Spawn = Callable[..., subprocess.Popen[str]]
BURN_LOOP = ["/bin/sh", "-c", "while :; do :; done"]


def cpu_ns(driver: CgroupDriver, path: str) -> int:
    """The cgroup's CPU counter as the kernel shows it."""
    if driver.version == 2:
        with open(cgroup_file(driver, path, "cpu", "cpu.stat")) as f:
            usage = dict(line.split() for line in f.read().splitlines())["usage_usec"]
        return int(usage) * 1000
    with open(cgroup_file(driver, path, "cpuacct", "cpuacct.usage")) as f:
        return int(f.read())


def working_set(driver: CgroupDriver, path: str) -> int:
    """usage - inactive_file from the kernel's files (the kubelet's formula)."""
    usage_name, inactive = ("memory.current", "inactive_file") if driver.version == 2 else \
        ("memory.usage_in_bytes", "total_inactive_file")
    with open(cgroup_file(driver, path, "memory", usage_name)) as f:
        usage = int(f.read())
    with open(cgroup_file(driver, path, "memory", "memory.stat")) as f:
        stat = dict(line.split() for line in f.read().splitlines())
    return max(0, usage - int(stat[inactive]))


def machine_busy_ns() -> int:
    with open("/proc/stat", "rb") as f:
        return parse_cpu_busy_ns(f.read())


def toucher(mib: int) -> list[str]:
    """A process that writes every page of `mib` MiB, says "ready" and sleeps."""
    code = (f"import sys, time\nb = bytearray({mib} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "print('ready', flush=True)\ntime.sleep(600)\n")
    return [sys.executable, "-c", code]


def container(snap: Snapshot, name: str) -> ContainerStats:
    return next(c for c in pod_of(snap).containers if c.name == name)


def pod_of(snap: Snapshot) -> PodStats:
    return next(p for p in snap.pods if p.name == "stats")


def within(actual: float, expected: float, rel: float = 0.10) -> bool:
    return abs(actual - expected) <= rel * abs(expected)


@pytest.fixture
def pod(driver: CgroupDriver, tmp_path_factory: pytest.TempPathFactory) -> PodTarget:
    driver.create("kubepods", CgroupSpec())
    driver.create("kubepods/burstable", CgroupSpec())
    driver.create(POD, CgroupSpec())
    # half a CPU: the burner runs at a rate the kernel enforces
    driver.create(BURN, CgroupSpec(cpu_quota_us=50_000, cpu_period_us=100_000))
    driver.create(MEM, CgroupSpec(memory_max=256 * MI))
    logs = tmp_path_factory.mktemp("logs")
    (logs / "burn").mkdir()
    (logs / "burn" / "0.log").write_bytes(b"l" * 100_000)
    return PodTarget("it", "stats", "stats1", POD, (
        ContainerTarget("burn", BURN, start_time=time.time(), log_dir=str(logs / "burn")),
        ContainerTarget("mem", MEM, start_time=time.time(), memory_limit=256 * MI),
    ), start_time=time.time())


def sampler_for(driver: CgroupDriver, target: PodTarget, tmp: str, **kw: object) -> Sampler:
    return Sampler(driver, lambda: [target], SystemClock(), node_name="it-node", nodefs_path=tmp,
                   settings=StatsSettings(**kw), pods_cgroup="kubepods")  # type: ignore[arg-type]


def test_cpu_counters_and_rates_match_the_kernel(driver: CgroupDriver, spawn: Spawn, pod: PodTarget,
                                                 tmp_path: Path) -> None:
    spawn(BURN, BURN_LOOP)
    sampler = sampler_for(driver, pod, str(tmp_path))
    try:
        time.sleep(0.5)  # past the first periods of the quota
        before = cpu_ns(driver, BURN)
        snap = sampler.sample([pod])
        after = cpu_ns(driver, BURN)
        first = container(snap, "burn").cpu
        assert first is not None and first.usage_nano_cores is None  # one read: no rate yet
        assert before <= first.usage_core_nano_seconds <= after
        t0, c0 = time.monotonic(), cpu_ns(driver, BURN)
        rates = []
        for _ in range(3):
            time.sleep(1.0)
            before = cpu_ns(driver, BURN)
            snap = sampler.sample([pod])
            after = cpu_ns(driver, BURN)
            t1, c1 = time.monotonic(), cpu_ns(driver, BURN)
            burn = container(snap, "burn").cpu
            assert burn is not None and burn.usage_nano_cores is not None
            assert before <= burn.usage_core_nano_seconds <= after
            kernel_rate = (c1 - c0) / (t1 - t0)  # ns per s over about the same second
            print(f"v{driver.version} burn: sampler {burn.usage_nano_cores / 1e6:.1f}m, "
                  f"kernel files {kernel_rate / 1e6:.1f}m")
            assert within(burn.usage_nano_cores, kernel_rate), (burn.usage_nano_cores, kernel_rate)
            rates.append(burn.usage_nano_cores)
            t0, c0 = t1, c1
            # the pod counts its containers (and nothing else runs in it)
            p = pod_of(snap).cpu
            assert p is not None and p.usage_nano_cores is not None
            assert within(p.usage_nano_cores, burn.usage_nano_cores)
        # the quota: at most half a CPU (a loaded machine may give it less, never more)
        assert max(rates) <= 0.5e9 * 1.10, rates
    finally:
        sampler.close()


def test_memory_working_set_matches_the_kernel(driver: CgroupDriver, spawn: Spawn, pod: PodTarget,
                                               tmp_path: Path) -> None:
    proc = spawn(MEM, toucher(48), stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    sampler = sampler_for(driver, pod, str(tmp_path))
    try:
        before = working_set(driver, MEM)
        snap = sampler.sample([pod])
        after = working_set(driver, MEM)
        mem = container(snap, "mem").memory
        assert mem is not None
        print(f"v{driver.version} mem: sampler {mem.working_set_bytes / MI:.2f} MiB, kernel files "
              f"{before / MI:.2f}..{after / MI:.2f} MiB")
        assert within(mem.working_set_bytes, (before + after) / 2)
        assert 48 * MI <= mem.working_set_bytes <= 48 * MI + 40 * MI  # the touched pages and an interpreter
        assert mem.rss_bytes is not None and mem.rss_bytes >= 48 * MI
        assert mem.available_bytes == 256 * MI - mem.working_set_bytes
        p = pod_of(snap).memory
        assert p is not None and within(p.working_set_bytes, working_set(driver, POD))
        assert p.working_set_bytes >= mem.working_set_bytes
        pods_system = snap.node.system_containers[0]
        assert pods_system.name == "pods" and pods_system.memory is not None
        assert pods_system.memory.working_set_bytes >= p.working_set_bytes * 0.9
    finally:
        sampler.close()


def test_node_figures(driver: CgroupDriver, pod: PodTarget, tmp_path: Path) -> None:
    sampler = sampler_for(driver, pod, str(tmp_path))
    try:
        before = machine_busy_ns()
        snap = sampler.sample([pod])
        after = machine_busy_ns()
        node = snap.node
        assert node.cpu is not None and before <= node.cpu.usage_core_nano_seconds <= after
        assert node.memory is not None and node.memory.available_bytes is not None
        assert 0 < node.memory.working_set_bytes <= node.memory.usage_bytes
        assert node.fs is not None and node.fs.capacity_bytes and node.fs.available_bytes is not None
        assert node.start_time is not None and node.start_time < time.time()
        time.sleep(1.0)
        node = sampler.sample([pod]).node
        assert node.cpu is not None and node.cpu.usage_nano_cores is not None
        assert 0 <= node.cpu.usage_nano_cores <= os.cpu_count() * 1e9 * 1.05  # type: ignore[operator]
    finally:
        sampler.close()


def test_logs_count_in_ephemeral_storage(driver: CgroupDriver, pod: PodTarget, tmp_path: Path) -> None:
    sampler = sampler_for(driver, pod, str(tmp_path))
    try:
        p = pod_of(sampler.sample([pod]))
        logs = container(sampler.latest, "burn").logs  # type: ignore[arg-type]
        assert logs is not None and logs.used_bytes is not None and logs.used_bytes >= 100_000
        assert p.ephemeral_storage is not None and p.ephemeral_storage.used_bytes == logs.used_bytes
    finally:
        sampler.close()


def test_kept_files_never_hold_a_cgroup_up(driver: CgroupDriver, spawn: Spawn, pod: PodTarget,
                                           tmp_path: Path) -> None:
    """The sampler keeps the pod's files open; the pod's cgroups are removed anyway, and the
    next pass drops them and closes what it held."""
    proc = spawn(BURN, BURN_LOOP)
    sampler = sampler_for(driver, pod, str(tmp_path))
    try:
        sampler.sample([pod])
        assert sampler.kept_files == 3 * 4 + 2  # pod, two containers, kubepods; /proc/stat and /proc/meminfo
        opens = sampler.files_opened
        for _ in range(3):
            sampler.sample([pod])
        assert sampler.files_opened == opens  # warm passes open nothing
        proc.kill()
        proc.wait()
        driver.kill(POD)
        driver.remove(POD)  # with our descriptors open on its files
        assert not cgroup_dirs(driver, POD)
        snap = sampler.sample([pod])  # the pod manager has not noticed yet: it still asks
        assert container(snap, "burn").cpu is None and pod_of(snap).memory is None
        assert sampler.kept_files == 3 + 2  # the removed cgroups' descriptors are closed
        snap = sampler.sample([])
        assert snap.pods == ()
    finally:
        sampler.close()


async def test_scraped_counters_give_the_kernel_rate(driver: CgroupDriver, spawn: Spawn, pod: PodTarget,
                                                     tmp_path: Path) -> None:
    """The sampler's task behind the real routes: a rate computed as the control plane will, from
    two scrapes' counters and their millisecond timestamps, matches the kernel's."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client.parser import text_string_to_metric_families

    from nodeagent.agent.api.stats import add_stats_routes

    def burn_counter(text: str) -> tuple[float, float]:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "container_cpu_usage_seconds_total" and s.labels["container"] == "burn":
                    assert s.timestamp is not None
                    return s.value, float(s.timestamp)
        raise AssertionError("no burn series")

    spawn(BURN, BURN_LOOP)
    sampler = sampler_for(driver, pod, str(tmp_path))
    task = asyncio.create_task(sampler.run())
    app = web.Application()
    add_stats_routes(app, sampler)
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as c:
            await asyncio.sleep(1.2)
            first = burn_counter(await (await c.get("/metrics/resource")).text())
            k0, t0 = cpu_ns(driver, BURN), time.monotonic()
            await asyncio.sleep(3.0)
            second = burn_counter(await (await c.get("/metrics/resource")).text())
            k1, t1 = cpu_ns(driver, BURN), time.monotonic()
            summary = await (await c.get("/stats/summary?only_cpu_and_memory=true")).json()
        scraped = (second[0] - first[0]) / (second[1] - first[1]) * 1e9  # ns per s
        kernel = (k1 - k0) / (t1 - t0)
        print(f"v{driver.version} scraped rate {scraped / 1e6:.1f}m, kernel files {kernel / 1e6:.1f}m")
        assert second[1] > first[1]
        assert within(scraped, kernel), (scraped, kernel)
        (p,) = [p for p in summary["pods"] if p["podRef"]["name"] == "stats"]
        (burn,) = [c for c in p["containers"] if c["name"] == "burn"]
        assert within(burn["cpu"]["usageNanoCores"], kernel, rel=0.15), (burn["cpu"], kernel)  # its own 1 s window
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sampler.kept_files == 0  # the task closed what it held
