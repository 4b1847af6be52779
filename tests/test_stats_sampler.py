"""The sampler and its reader against fake trees: cgroup files laid out as cgroupfs (the fake
driver's usage tree, and the real v1/v2 drivers on plain directories), a fake /proc, a fake clock."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from fakes import FakeCgroupDriver
from structlog.testing import capture_logs

from nodeagent.agent.cgroups.usage import CgroupUsage, UsageFiles, parse_cpu_ns, parse_usage, stat_value
from nodeagent.agent.cgroups.v1 import CgroupV1Driver
from nodeagent.agent.cgroups.v2 import CgroupV2Driver
from nodeagent.agent.config.reload import plan
from nodeagent.agent.config.settings import parse_config
from nodeagent.agent.config.stats import StatsSettings
from nodeagent.agent.node.machine import parse_cpu_busy_ns
from nodeagent.agent.pods.plan import plan_pod
from nodeagent.agent.pods.stats_targets import stats_target
from nodeagent.agent.stats.files import KeptFiles
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.agent.stats.targets import ContainerTarget, PodTarget
from nodeagent.agent.stats.values import PodStats, Snapshot
from nodeagent.core.clock import FakeClock
from nodeagent.core.errors import FieldError
from nodeagent.core.model import parse_pod
from nodeagent.daemonkit.configfile import ConfigError

MI = 1 << 20
POD = "kubepods/burstable/podu1"
APP = POD + "/app"
SIDE = POD + "/side"
MEMINFO = "MemTotal:       8000000 kB\nMemFree:        2000000 kB\nInactive(file):  1000000 kB\nAnonPages:       500000 kB\n"


class World:
    """A fake cgroup tree, /proc and nodefs, and a sampler over them."""

    def __init__(self, tmp: Path, settings: StatsSettings | None = None, budget: int | None = None) -> None:
        self.tmp = tmp
        self.driver = FakeCgroupDriver(usage_tree=str(tmp / "cgroup"))
        self.clock = FakeClock(start=1000.0, wall_offset=1_700_000_000.0)
        self.proc = tmp / "proc"
        self.proc.mkdir()
        self.busy_ticks = 0
        self.write_proc()
        self.logs = tmp / "logs"
        (self.logs / "app").mkdir(parents=True)
        (self.logs / "side").mkdir()
        (self.logs / "app" / "0.log").write_bytes(b"x" * 10_000)
        self.targets = [PodTarget("default", "web", "u1", POD, (
            ContainerTarget("app", APP, start_time=1_700_000_500.0, log_dir=str(self.logs / "app"), memory_limit=64 * MI),
            ContainerTarget("side", SIDE, start_time=1_700_000_501.0, log_dir=str(self.logs / "side")),
        ), start_time=1_700_000_499.0, memory_limit=128 * MI)]
        self.sampler = Sampler(self.driver, lambda: self.targets, self.clock, node_name="node-1", nodefs_path=str(tmp),
                               settings=settings or StatsSettings(max_open_files=budget), proc=str(self.proc),
                               boot=lambda: 1_699_000_000.0)
        self.set(APP, cpu_usec=0, memory=10 * MI, inactive_file=2 * MI, anon=7 * MI)
        self.set(SIDE, cpu_usec=0, memory=MI)
        self.set(POD, cpu_usec=0, memory=11 * MI, inactive_file=2 * MI, anon=8 * MI)
        self.set("kubepods", cpu_usec=0, memory=20 * MI)

    def set(self, path: str, **kw: int) -> None:
        self.driver.set_usage(path, **kw)

    def write_proc(self) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice; busy = all but idle/iowait
        t = self.busy_ticks
        (self.proc / "stat").write_text(f"cpu  {t} 0 0 999999 77 0 0 0 0 0\ncpu0 {t} 0 0 999999 77 0 0 0 0 0\nbtime 1\n")
        (self.proc / "meminfo").write_text(MEMINFO)

    def step(self, seconds: float = 1.0) -> Snapshot:
        self.clock.advance(seconds)
        return self.sampler.sample(self.targets)

    def pod(self, snap: Snapshot) -> PodStats:
        return snap.pods[0]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_first_pass_has_counters_and_memory_but_no_rates(world: World) -> None:
    snap = world.sampler.sample(world.targets)
    pod = world.pod(snap)
    app = pod.containers[0]
    assert app.cpu is not None and app.cpu.usage_core_nano_seconds == 0 and app.cpu.usage_nano_cores is None
    assert app.memory is not None
    assert (app.memory.usage_bytes, app.memory.working_set_bytes, app.memory.rss_bytes) == (10 * MI, 8 * MI, 7 * MI)
    assert app.memory.available_bytes == 64 * MI - 8 * MI
    assert pod.memory is not None and pod.memory.working_set_bytes == 9 * MI and pod.memory.available_bytes == 119 * MI
    assert pod.containers[1].memory is not None and pod.containers[1].memory.available_bytes is None  # no limit
    assert app.start_time == 1_700_000_500.0 and pod.start_time == 1_700_000_499.0
    assert snap.time == 1_700_001_000.0 and snap.node.start_time == 1_699_000_000.0
    assert app.cpu.time == pytest.approx(1_700_001_000.0)


def test_rates_over_the_window(world: World) -> None:
    world.sampler.sample(world.targets)
    world.set(APP, cpu_usec=250_000, memory=10 * MI)  # 250 ms of CPU in one second: 250m
    world.set(SIDE, cpu_usec=50_000, memory=MI)
    world.set(POD, cpu_usec=300_000, memory=11 * MI)
    world.busy_ticks = 150  # 1.5 s of busy time (USER_HZ 100) on the machine
    world.write_proc()
    snap = world.step(1.0)
    pod = world.pod(snap)
    assert pod.containers[0].cpu is not None and pod.containers[0].cpu.usage_nano_cores == 250_000_000
    assert pod.containers[1].cpu is not None and pod.containers[1].cpu.usage_nano_cores == 50_000_000
    assert pod.cpu is not None and pod.cpu.usage_nano_cores == 300_000_000
    assert pod.cpu.usage_core_nano_seconds == 300_000_000
    assert snap.node.cpu is not None
    assert snap.node.cpu.usage_core_nano_seconds == parse_cpu_busy_ns(b"cpu  150 0 0 9 9 0 0 0 0 0\n")
    assert snap.node.cpu.usage_nano_cores == pytest.approx(snap.node.cpu.usage_core_nano_seconds, rel=1e-9)
    pods = snap.node.system_containers[0]
    assert pods.name == "pods" and pods.memory is not None and pods.memory.working_set_bytes == 20 * MI


def test_node_memory_from_meminfo(world: World) -> None:
    node = world.sampler.sample(world.targets).node
    assert node.memory is not None
    kib = 1024
    assert node.memory.usage_bytes == 6_000_000 * kib  # MemTotal - MemFree
    assert node.memory.working_set_bytes == 5_000_000 * kib  # minus Inactive(file)
    assert node.memory.available_bytes == 3_000_000 * kib
    assert node.memory.rss_bytes == 500_000 * kib
    assert node.fs is not None and node.fs.capacity_bytes and node.fs.used_bytes is not None


def test_a_counter_reset_counts_from_the_new_cgroup(world: World) -> None:
    world.set(APP, cpu_usec=5_000_000, memory=MI)
    world.sampler.sample(world.targets)
    world.set(APP, cpu_usec=100_000, memory=MI)  # recreated: 100 ms since
    app = world.pod(world.step(1.0)).containers[0]
    assert app.cpu is not None and app.cpu.usage_nano_cores == 100_000_000
    assert app.cpu.usage_core_nano_seconds == 100_000_000  # the counter itself is shown as read


def test_a_missed_read_makes_the_next_rate_span_the_gap(world: World) -> None:
    world.sampler.sample(world.targets)
    stat = world.driver.usage_files(APP).cpu
    assert stat is not None
    Path(stat).write_text("")  # unreadable this pass (as a kernel read failing)
    app = world.pod(world.step(1.0)).containers[0]
    assert app.cpu is None and app.memory is None  # this pass could not read it: left out
    world.set(APP, cpu_usec=1_000_000, memory=MI)  # 1 s of CPU over the 2 s since the last good read
    app = world.pod(world.step(1.0)).containers[0]
    assert app.cpu is not None and app.cpu.usage_nano_cores == 500_000_000


def test_a_missing_container_cgroup_leaves_the_pod_figures(world: World) -> None:
    targets = [PodTarget("default", "web", "u1", POD, (ContainerTarget("late", POD + "/late"),))]
    snap = world.sampler.sample(targets)
    pod = snap.pods[0]
    assert pod.containers[0].cpu is None and pod.containers[0].memory is None
    assert pod.cpu is not None and pod.memory is not None


def test_files_are_opened_once_and_reread(world: World) -> None:
    files_per_pass = 4 * 3 + 2  # 4 cgroups x 3 files, /proc/stat and /proc/meminfo
    for _ in range(5):
        world.step(1.0)
    assert world.sampler.files_opened == files_per_pass
    assert world.sampler.kept_files == files_per_pass
    world.set(APP, cpu_usec=777_000, memory=3 * MI)  # rewritten in place: the kept descriptor sees it
    app = world.pod(world.step(1.0)).containers[0]
    assert app.cpu is not None and app.cpu.usage_core_nano_seconds == 777_000_000
    assert world.sampler.files_opened == files_per_pass


def test_beyond_the_budget_files_are_opened_each_time(tmp_path: Path) -> None:
    world = World(tmp_path, budget=5)
    for _ in range(3):
        world.step(1.0)
    assert world.sampler.kept_files == 5
    assert world.sampler.files_opened == 5 + 3 * (14 - 5)
    assert world.pod(world.step(1.0)).cpu is not None


def test_a_pod_that_went_away_has_its_files_closed_and_windows_dropped(world: World) -> None:
    world.step(1.0)
    assert world.sampler.kept_files == 14
    world.targets = []
    snap = world.step(1.0)
    assert snap.pods == ()
    assert world.sampler.kept_files == 3 * 1 + 2  # kubepods and /proc
    assert world.sampler.series == {"kubepods", "/proc/stat"}


def test_logs_and_ephemeral_storage(world: World) -> None:
    pod = world.pod(world.sampler.sample(world.targets))
    app, side = pod.containers
    assert app.logs is not None and app.logs.used_bytes is not None and app.logs.used_bytes >= 10_000
    assert app.logs.inodes_used == 1 and app.logs.capacity_bytes
    assert side.logs is not None and side.logs.used_bytes == 0
    assert app.rootfs is None  # a host-process container has no writable layer
    assert pod.ephemeral_storage is not None
    assert pod.ephemeral_storage.used_bytes == app.logs.used_bytes + side.logs.used_bytes
    assert pod.ephemeral_storage.inodes_used == 1


def test_directories_are_walked_every_storage_interval(tmp_path: Path) -> None:
    world = World(tmp_path, StatsSettings(interval=1.0, cpu_window=1.0, storage_interval=10.0))
    first = world.pod(world.sampler.sample(world.targets)).containers[1].logs
    assert first is not None and first.used_bytes == 0
    (world.logs / "side" / "0.log").write_bytes(b"y" * 50_000)
    for _ in range(9):
        logs = world.pod(world.step(1.0)).containers[1].logs
        assert logs is not None and (logs.time, logs.used_bytes, logs.inodes_used) == (first.time, 0, 0)  # not walked yet
    logs = world.pod(world.step(1.0)).containers[1].logs
    assert logs is not None and logs.used_bytes is not None and logs.used_bytes >= 50_000


def test_a_new_directory_is_walked_at_once(world: World) -> None:
    world.sampler.sample(world.targets)
    (world.tmp / "vol").mkdir()
    (world.tmp / "vol" / "data").write_bytes(b"z" * 20_000)
    t = world.targets[0]
    world.targets = [PodTarget(t.namespace, t.name, t.uid, t.cgroup, t.containers, t.start_time, t.memory_limit,
                               volume_dirs=(str(world.tmp / "vol"),))]
    pod = world.pod(world.step(1.0))
    assert pod.ephemeral_storage is not None and pod.ephemeral_storage.used_bytes is not None
    assert pod.ephemeral_storage.used_bytes >= 20_000 + 10_000


def test_current_is_none_before_the_first_pass_when_failed_and_when_stale(world: World) -> None:
    assert world.sampler.current() is None
    snap = world.sampler.sample(world.targets)
    assert world.sampler.current() is snap
    world.clock.advance(5.0)  # STALE_INTERVALS x 1 s
    assert world.sampler.current() is snap
    world.clock.advance(0.01)
    assert world.sampler.current() is None
    world.step(0.0)
    assert world.sampler.current() is not None
    world.sampler.failed = True
    assert world.sampler.current() is None


def test_reconfigure_applies_at_the_next_pass(world: World) -> None:
    world.sampler.sample(world.targets)
    world.sampler.reconfigure(StatsSettings(interval=1.0, cpu_window=3.0))
    assert world.sampler.settings.cpu_window == 1.0
    world.set(APP, cpu_usec=300_000, memory=MI)
    app = world.pod(world.step(1.0)).containers[0]
    assert world.sampler.settings.cpu_window == 3.0
    assert app.cpu is not None and app.cpu.usage_nano_cores is None  # windows restart over the new span
    for usec in (600_000, 900_000, 1_200_000):
        world.set(APP, cpu_usec=usec, memory=MI)
        app = world.pod(world.step(1.0)).containers[0]
    assert app.cpu is not None and app.cpu.usage_nano_cores == 300_000_000
    assert world.sampler.window_span(APP) == pytest.approx(3.0)


def test_a_read_failure_is_logged_once_until_it_recovers(world: World) -> None:
    stat = world.driver.usage_files(APP).memory_stat
    world.sampler.sample(world.targets)
    with capture_logs() as logs:
        Path(stat).write_text("inactive_file garbage\n")
        world.step(1.0)
        world.step(1.0)
        world.set(APP, cpu_usec=1, memory=MI)
        world.step(1.0)
    events = [e["event"] for e in logs if e["event"].startswith("stats_read")]
    assert events == ["stats_read_failed", "stats_read_recovered"]


def test_a_broken_proc_stat_leaves_the_node_cpu_out_and_is_logged_once(world: World) -> None:
    with capture_logs() as logs:
        (world.proc / "stat").write_text("intr 1 2 3\n")
        first = world.step(1.0).node
        world.step(1.0)
        world.write_proc()
        again = world.step(1.0).node
    assert first.cpu is None and first.memory is None
    assert again.cpu is not None and again.memory is not None
    events = [e["event"] for e in logs if e["event"].startswith("stats_read")]
    assert events == ["stats_read_failed", "stats_read_recovered"]


async def test_run_samples_on_schedule_skips_missed_ticks_and_closes_files(world: World) -> None:
    sleeps: list[float] = []
    stop_after = 6

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(round(seconds, 6))
        if len(sleeps) == 3:
            world.clock.advance(3.5)  # the loop was held up: ticks 3..5 are missed, not caught up
        world.clock.advance(seconds)
        if len(sleeps) >= stop_after:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        await world.sampler.run(sleep=fake_sleep)
    assert world.sampler.passes == stop_after
    assert sleeps == [1.0, 1.0, 1.0, 0.5, 1.0, 1.0]
    assert world.sampler.kept_files == 0


async def test_run_survives_a_failing_pass(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = world.sampler.sample

    def flaky(targets: object) -> Snapshot:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(world.targets)

    monkeypatch.setattr(world.sampler, "sample", flaky)
    states: list[bool] = []

    async def fake_sleep(seconds: float) -> None:
        states.append(world.sampler.failed)
        world.clock.advance(seconds)
        if len(states) == 3:
            raise asyncio.CancelledError

    with capture_logs() as logs, pytest.raises(asyncio.CancelledError):
        await world.sampler.run(sleep=fake_sleep)
    assert states == [False, True, False]
    assert [e["event"] for e in logs if e["event"].startswith("stats_pass")] == ["stats_pass_failed",
                                                                                   "stats_pass_recovered"]


async def test_run_survives_a_failing_targets_provider(world: World) -> None:
    calls = {"n": 0}

    def targets() -> list[PodTarget]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("the pod table changed under us")
        return world.targets

    world.sampler.targets = targets
    states: list[bool] = []

    async def fake_sleep(seconds: float) -> None:
        states.append(world.sampler.failed)
        world.clock.advance(seconds)
        if len(states) == 2:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await world.sampler.run(sleep=fake_sleep)
    assert states == [True, False]
    assert world.sampler.passes == 1


# ---- the drivers' usage files, and parsing them ----


def test_v2_driver_names_the_unified_files(tmp_path: Path) -> None:
    drv = CgroupV2Driver(mount=str(tmp_path), root="/agent")
    d = str(tmp_path / "agent" / "kubepods" / "podx")
    assert drv.usage_files("kubepods/podx") == UsageFiles(2, f"{d}/cpu.stat", f"{d}/memory.current", f"{d}/memory.stat")


def test_v1_driver_names_cpuacct_and_memory_files(tmp_path: Path) -> None:
    hier = {"cpu": str(tmp_path / "cpu"), "cpuacct": str(tmp_path / "cpuacct"), "memory": str(tmp_path / "memory")}
    drv = CgroupV1Driver(mount=str(tmp_path), root="/agent", hierarchies=hier)
    assert drv.usage_files("kubepods/podx") == UsageFiles(
        1, f"{tmp_path}/cpuacct/agent/kubepods/podx/cpuacct.usage",
        f"{tmp_path}/memory/agent/kubepods/podx/memory.usage_in_bytes",
        f"{tmp_path}/memory/agent/kubepods/podx/memory.stat")
    no_acct = CgroupV1Driver(mount=str(tmp_path), root="/", hierarchies={"memory": str(tmp_path / "memory")})
    assert no_acct.usage_files("a").cpu is None


def test_the_sampler_reads_a_v1_tree(tmp_path: Path) -> None:
    hier = {"cpuacct": str(tmp_path / "cpuacct"), "memory": str(tmp_path / "memory")}
    drv = CgroupV1Driver(mount=str(tmp_path), root="/agent", hierarchies=hier)
    files = drv.usage_files(APP)
    for f in (files.cpu, files.memory):
        assert f is not None
        os.makedirs(os.path.dirname(f), exist_ok=True)
    assert files.cpu is not None
    Path(files.cpu).write_text("1234567890\n")
    Path(files.memory).write_text(f"{10 * MI}\n")
    Path(files.memory_stat).write_text(f"cache 0\nrss 0\ninactive_file {MI}\ntotal_cache {3 * MI}\n"
                                       f"total_rss {6 * MI}\ntotal_inactive_file {3 * MI}\ntotal_pgfault 9\n"
                                       f"total_pgmajfault 1\n")
    clock = FakeClock()
    targets = [PodTarget("ns", "p", "u1", POD, (ContainerTarget("app", APP),))]
    sampler = Sampler(drv, lambda: targets, clock, node_name="n", nodefs_path=str(tmp_path), pods_cgroup=None,
                      proc=str(tmp_path / "no-proc"), boot=lambda: 0.0)
    app = sampler.sample(targets).pods[0].containers[0]
    assert app.cpu is not None and app.cpu.usage_core_nano_seconds == 1234567890  # v1 counts nanoseconds
    assert app.memory is not None
    assert (app.memory.working_set_bytes, app.memory.rss_bytes, app.memory.page_faults) == (7 * MI, 6 * MI, 9)
    sampler.close()


@pytest.mark.parametrize("version, cpu, memory, stat, expected", [
    (2, b"usage_usec 1500\nuser_usec 1000\n", b"4096\n", b"anon 100\ninactive_file 1000\npgfault 7\npgmajfault 3\n",
     CgroupUsage(1_500_000, 4096, 3096, 100, 7, 3)),
    (2, None, b"10\n", b"inactive_file 50\n", CgroupUsage(None, 10, 0, 0, 0, 0)),  # working set floored at 0
    (1, b"987\n", b"5000\n", b"rss 1\ninactive_file 2\ntotal_rss 300\ntotal_inactive_file 1000\n",
     CgroupUsage(987, 5000, 4000, 300, 0, 0)),  # the hierarchical total_* keys, not the local ones
])
def test_parse_usage(version: int, cpu: bytes | None, memory: bytes, stat: bytes, expected: CgroupUsage) -> None:
    assert parse_usage(version, cpu, memory, stat) == expected


@pytest.mark.parametrize("version, cpu, memory, stat", [
    (2, b"user_usec 1\n", b"1", b""),  # no usage_usec
    (2, b"usage_usec 1\n", b"max", b""),
    (1, b"x", b"1", b""),
    (3, None, b"1", b""),
])
def test_parse_usage_refuses_garbage(version: int, cpu: bytes | None, memory: bytes, stat: bytes) -> None:
    with pytest.raises(ValueError):
        parse_usage(version, cpu, memory, stat)


@pytest.mark.parametrize("text, key, expected", [
    (b"anon 5\nanon_thp 7\nfile 9\n", b"anon", 5),  # first line, and not anon_thp
    (b"anon_thp 7\nanon 5\n", b"anon", 5),
    (b"rss 1\nrss_huge 2\ntotal_rss 3\ntotal_rss_huge 4\n", b"total_rss", 3),
    (b"rss 1\nrss_huge 2\ntotal_rss 3\n", b"rss", 1),
    (b"a 1\npgmajfault 42", b"pgmajfault", 42),  # last line without a newline
    (b"a 1\nb 2\n", b"pgfault", 0),  # absent
    (b"", b"anon", 0),
    (b"xanon 3\n", b"anon", 0),  # a longer key is not the key
])
def test_stat_value(text: bytes, key: bytes, expected: int) -> None:
    assert stat_value(text, key) == expected


def test_stat_value_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        stat_value(b"anon lots\n", b"anon")


def test_parse_cpu_ns() -> None:
    assert parse_cpu_ns(2, b"usage_usec 12\n") == 12_000
    assert parse_cpu_ns(1, b"12\n") == 12


@pytest.mark.parametrize("text, hz, expected", [
    (b"cpu  100 20 30 9999 5 1 2 3 4 5\ncpu0 1 2 3 4 5 6 7 8 9 10\n", 100, (100 + 20 + 30 + 1 + 2 + 3) * 10_000_000),
    (b"cpu  7 0 0 0 0 0 0 0 0 0", 250, 7 * 4_000_000),
])
def test_parse_cpu_busy_ns(text: bytes, hz: int, expected: int) -> None:
    assert parse_cpu_busy_ns(text, hz) == expected


@pytest.mark.parametrize("text", [b"", b"intr 1 2 3\n", b"cpu 1 2\n"])
def test_parse_cpu_busy_ns_refuses_other_files(text: bytes) -> None:
    with pytest.raises(ValueError, match="cpu line"):
        parse_cpu_busy_ns(text)


# ---- settings and targets ----


def test_config_keys_build_the_settings_and_reload_live() -> None:
    base = parse_config({}, "test")
    assert base.stats == StatsSettings()
    new = parse_config({"statsInterval": "500ms", "statsCPURateWindow": "5s", "statsStorageInterval": "0s",
                        "statsMaxOpenFiles": 64}, "test")
    assert new.stats == StatsSettings(interval=0.5, cpu_window=5.0, storage_interval=0.0, max_open_files=64)
    result = plan(base, new)
    assert set(result.applied) == {"statsInterval", "statsCPURateWindow", "statsStorageInterval", "statsMaxOpenFiles"}
    assert result.restart_required == []


@pytest.mark.parametrize("data, message", [
    ({"statsInterval": "2s"}, "statsCPURateWindow: must be at least statsInterval (2.0s), got 1.0s"),
    ({"statsInterval": "10ms"}, "statsInterval: must be at least 0.1s"),
    ({"statsStorageInterval": "-1s"}, "statsStorageInterval: must not be negative"),
    ({"statsMaxOpenFiles": -1}, "statsMaxOpenFiles: must not be negative"),
    ({"statsCpuRateWindow": "1s"}, "statsCpuRateWindow: unknown field"),
])
def test_bad_config_keys_are_errors_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(data, "test")
    assert any(line.startswith(message) for line in e.value.errors), e.value.errors


@pytest.mark.parametrize("kwargs, field", [
    (dict(interval=0.05), "statsInterval"),
    (dict(interval=2.0, cpu_window=1.0), "statsCPURateWindow"),
    (dict(storage_interval=-1.0), "statsStorageInterval"),
    (dict(max_open_files=-1), "statsMaxOpenFiles"),
    (dict(interval=float("nan")), "statsInterval"),
])
def test_bad_settings_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(FieldError) as e:
        StatsSettings(**kwargs)  # type: ignore[arg-type]
    assert e.value.path == field


@pytest.mark.parametrize("build, field", [
    (lambda: PodTarget("", "p", "u", "kubepods/podu"), "metadata.namespace"),
    (lambda: PodTarget("ns", "p", "u", "/"), "pod.cgroup"),
    (lambda: PodTarget("ns", "p", "u", "kubepods/podu", (ContainerTarget("a", "x/a"), ContainerTarget("a", "x/b"))),
     "spec.containers"),
    (lambda: ContainerTarget("", "x"), "container.name"),
    (lambda: ContainerTarget("a", ""), "container.cgroup"),
])
def test_bad_targets_name_the_field(build: object, field: str) -> None:
    with pytest.raises(FieldError) as e:
        build()  # type: ignore[operator]
    assert e.value.path == field


def test_pod_target_follows_the_cgroup_layout() -> None:
    pod = parse_pod({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "uid": "1234-abcd"},
        "spec": {"containers": [
            {"name": "app", "command": ["sleep", "1"],
             "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}},
            {"name": "side", "command": ["sleep", "1"]},
        ]},
    })
    t = stats_target(plan_pod(pod, state_dir="/var/lib/nodeagent", memory_capacity=16 * 2**30),
                     start_time=10.0, container_starts={"app": 12.0})
    assert t == PodTarget("shop", "web", "1234-abcd", "kubepods/burstable/pod1234-abcd", (
        ContainerTarget("app", "kubepods/burstable/pod1234-abcd/app", start_time=12.0,
                        log_dir="/var/lib/nodeagent/pods/shop_web_1234-abcd/app", memory_limit=64 * MI),
        ContainerTarget("side", "kubepods/burstable/pod1234-abcd/side", start_time=None,
                        log_dir="/var/lib/nodeagent/pods/shop_web_1234-abcd/side"),
    ), start_time=10.0, memory_limit=None)  # one container without a limit: no pod memory.max
    guaranteed = parse_pod({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "g", "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": [{"name": "c", "command": ["sleep", "1"],
                                 "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}}]},
    })
    g = stats_target(plan_pod(guaranteed, state_dir="/var/lib/nodeagent", memory_capacity=16 * 2**30))
    assert (g.cgroup, g.memory_limit, g.containers[0].cgroup) == ("kubepods/podu-1", 128 * MI, "kubepods/podu-1/c")


def test_kept_files_budget_and_sweep(tmp_path: Path) -> None:
    paths = []
    for i in range(4):
        p = tmp_path / f"f{i}"
        p.write_text(str(i))
        paths.append(str(p))
    files = KeptFiles(budget=2)
    assert [files.read(p) for p in paths] == [b"0", b"1", b"2", b"3"]
    assert len(files) == 2 and files.opens == 4
    assert files.sweep() == 0  # both kept files were read
    files.read(paths[0])
    assert files.sweep() == 1  # f1 was not read since the last sweep
    assert len(files) == 1
    with pytest.raises(FileNotFoundError):
        files.read(str(tmp_path / "missing"))
    files.close()
    assert len(files) == 0
