"""The cgroup drivers against a real kernel: v1 on the hybrid host, v2 in the UML guest.

Every expectation is read back from the kernel's own files (located by the test, not the driver)
or observed on real processes: OOM kills, CFS throttling, kill, reaping.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable

import pytest

from nodeagent.agent.cgroups.common import CgroupError
from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.core.errors import FieldError
from nodeagent.core.resources import shares_to_cpu_weight

MI = 1024 * 1024
V1_UNLIMITED = str(2**63 - 4096)  # memory.limit_in_bytes "unlimited", page-rounded
CONTAINER = "kubepods/burstable/pod1234/app"
KernelFile = Callable[[str, str, str], str]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def dead(pid: int) -> bool:
    """Gone or a zombie: it will never run again."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def has(driver: CgroupDriver, controller: str) -> bool:
    return driver.hierarchy(controller) is not None


def settings(driver: CgroupDriver, kernel_file: KernelFile, path: str) -> dict[str, str]:
    """The limits as the kernel shows them, in one shape for both versions."""
    if driver.version == 2:
        return {
            "weight": kernel_file(path, "cpu", "cpu.weight"),
            "cpu.max": kernel_file(path, "cpu", "cpu.max"),
            "memory.max": kernel_file(path, "memory", "memory.max"),
            "memory.high": kernel_file(path, "memory", "memory.high"),
            "pids.max": kernel_file(path, "pids", "pids.max"),
        }
    out = {
        "shares": kernel_file(path, "cpu", "cpu.shares"),
        "quota": kernel_file(path, "cpu", "cpu.cfs_quota_us"),
        "period": kernel_file(path, "cpu", "cpu.cfs_period_us"),
        "memory.max": kernel_file(path, "memory", "memory.limit_in_bytes"),
        "pids.max": kernel_file(path, "pids", "pids.max"),
    }
    try:
        out["memsw"] = kernel_file(path, "memory", "memory.memsw.limit_in_bytes")
    except FileNotFoundError:
        pass  # no swap accounting in this kernel
    return out


LIMITED = CgroupSpec(cpu_shares=512, cpu_quota_us=20000, memory_max=64 * MI, memory_high=48 * MI, pids_max=50)


def test_create_writes_the_limits(driver: CgroupDriver, kernel_file: KernelFile) -> None:
    driver.create(CONTAINER, LIMITED)
    driver.create(CONTAINER, LIMITED)  # idempotent
    got = settings(driver, kernel_file, CONTAINER)
    if driver.version == 2:
        assert got == {
            "weight": str(shares_to_cpu_weight(512)),
            "cpu.max": "20000 100000",
            "memory.max": str(64 * MI),
            "memory.high": str(48 * MI),
            "pids.max": "50",
        }
    else:
        expected = {"shares": "512", "quota": "20000", "period": "100000", "memory.max": str(64 * MI), "pids.max": "50"}
        if "memsw" in got:
            expected["memsw"] = str(64 * MI)  # no swap beyond the limit
        assert got == expected
    assert driver.exists(CONTAINER) and driver.exists("kubepods/burstable")
    assert driver.children("kubepods") == ["burstable"]
    assert driver.children("kubepods/burstable/pod1234") == ["app"]


def test_update_changes_and_clears_limits(driver: CgroupDriver, kernel_file: KernelFile) -> None:
    driver.create(CONTAINER, LIMITED)
    driver.update(CONTAINER, CgroupSpec(cpu_shares=2048, cpu_quota_us=150000, cpu_period_us=50000, memory_max=128 * MI))
    got = settings(driver, kernel_file, CONTAINER)
    if driver.version == 2:
        assert got["weight"] == str(shares_to_cpu_weight(2048))
        assert got["cpu.max"] == "150000 50000"
        assert got["memory.max"] == str(128 * MI) and got["memory.high"] == "max"
    else:
        assert (got["shares"], got["quota"], got["period"]) == ("2048", "150000", "50000")
        assert got["memory.max"] == str(128 * MI) and got.get("memsw", got["memory.max"]) == got["memory.max"]
    assert got["pids.max"] == "max"

    driver.update(CONTAINER, CgroupSpec())  # everything back to unlimited / default
    got = settings(driver, kernel_file, CONTAINER)
    if driver.version == 2:
        assert got == {"weight": "100", "cpu.max": "max 100000", "memory.max": "max", "memory.high": "max", "pids.max": "max"}
    else:
        assert (got["shares"], got["quota"], got["memory.max"], got["pids.max"]) == ("1024", "-1", V1_UNLIMITED, "max")
        assert got.get("memsw", V1_UNLIMITED) == V1_UNLIMITED


def test_update_from_the_previous_spec_writes_what_moved(driver: CgroupDriver, kernel_file: KernelFile) -> None:
    """What the QoS tiers do on every create: the weight alone moves (one write); any other
    difference is the full update; a cgroup gone behind our back is an OSError."""
    driver.create(CONTAINER, LIMITED)
    before = settings(driver, kernel_file, CONTAINER)
    driver.update(CONTAINER, dataclasses.replace(LIMITED, cpu_shares=3000), previous=LIMITED)
    got = settings(driver, kernel_file, CONTAINER)
    key, value = ("weight", str(shares_to_cpu_weight(3000))) if driver.version == 2 else ("shares", "3000")
    assert got == {**before, key: value}
    moved = dataclasses.replace(LIMITED, cpu_shares=3000, memory_max=96 * MI)
    driver.update(CONTAINER, moved, previous=dataclasses.replace(LIMITED, cpu_shares=3000))
    assert settings(driver, kernel_file, CONTAINER)["memory.max"] == str(96 * MI)
    with pytest.raises(OSError):
        driver.update("nope", dataclasses.replace(LIMITED, cpu_shares=3000), previous=LIMITED)


def test_a_half_made_cgroup_is_a_child_and_is_removed(driver: CgroupDriver,
                                                     on_disk: Callable[[str], list[str]]) -> None:
    """A crash between the mkdirs of a create (v1: one per hierarchy) leaves the cgroup in some
    hierarchies only; the orphan sweep finds it through children() and removes it everywhere
    (before, children() read the memory hierarchy alone, and such a cgroup stayed)."""
    driver.create("kubepods/burstable", CgroupSpec())
    half = "kubepods/burstable/podhalf"
    first = os.path.dirname(sorted(driver.procs_files(half))[0])  # one hierarchy (v2: the only one)
    os.mkdir(first)
    assert on_disk(half) == [first]
    assert driver.children("kubepods/burstable") == ["podhalf"]
    driver.kill(half)
    driver.remove(half)
    assert on_disk(half) == [] and driver.children("kubepods/burstable") == []


def test_update_of_a_missing_cgroup_fails(driver: CgroupDriver) -> None:
    with pytest.raises(CgroupError):
        driver.update("nope", CgroupSpec())


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (CgroupSpec(cpu_shares=1), "cpu_shares"),
        (CgroupSpec(cpu_quota_us=999), "cpu_quota_us"),
        (CgroupSpec(cpu_period_us=10), "cpu_period_us"),
        (CgroupSpec(memory_max=0), "memory_max"),
        (CgroupSpec(pids_max=-1), "pids_max"),
    ],
)
def test_bad_spec_is_rejected_before_any_write(driver: CgroupDriver, spec: CgroupSpec, field: str) -> None:
    with pytest.raises(FieldError, match=field):
        driver.create("bad", spec)
    assert not driver.exists("bad")


@pytest.mark.parametrize("path", ["../escape", "a/../../b", "./x"])
def test_paths_cannot_escape_the_root(driver: CgroupDriver, path: str) -> None:
    with pytest.raises(FieldError):
        driver.create(path, CgroupSpec())


def test_memory_limit_oom_kills(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    driver.create("oom", CgroupSpec(memory_max=64 * MI))
    hog = "b = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
    p = spawn("oom", python(hog), stdout=-1)
    out, _ = p.communicate(timeout=120)  # type: ignore[attr-defined]
    assert p.returncode == -signal.SIGKILL, (p.returncode, out)  # type: ignore[attr-defined]
    assert "survived" not in out
    stats = driver.stats("oom")
    assert stats.oom_kills >= 1
    if driver.version == 2:
        assert stats.oom_events >= 1


def test_oom_kills_count_at_the_parent(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    """A pod-level stats() sees its containers' OOM kills (v2 natively, v1 summed by the driver)."""
    driver.create("pod", CgroupSpec())
    driver.create("pod/app", CgroupSpec(memory_max=32 * MI))
    p = spawn("pod/app", python("b = bytearray(100 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])"))
    assert p.wait(timeout=120) == -signal.SIGKILL  # type: ignore[attr-defined]
    assert driver.stats("pod").oom_kills >= 1


def test_cpu_quota_throttles(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    if not has(driver, "cpu"):
        pytest.skip("kernel lacks the cpu controller")
    driver.create("busy", CgroupSpec(cpu_quota_us=20000, cpu_period_us=100000))
    t0 = time.monotonic()
    p = spawn("busy", python("import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass"))
    p.wait(timeout=60)  # type: ignore[attr-defined]
    wall_usec = (time.monotonic() - t0) * 1e6
    stats = driver.stats("busy")
    assert stats.cpu_nr_throttled > 0
    assert stats.cpu_throttled_usec > 0
    share = stats.cpu_usage_usec / wall_usec  # the quota is 20 % of one CPU
    assert 0.10 < share < 0.32, (stats, wall_usec)


def test_kill_ends_a_process_and_its_child(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    driver.create("k/app", CgroupSpec())
    p = spawn("k/app", ["/bin/sh", "-c", "sleep 1000 & exec sleep 1000"])
    assert wait_for(lambda: len(driver.pids("k")) == 2), driver.pids("k")
    pids = driver.pids("k")
    assert p.pid in pids  # type: ignore[attr-defined]
    driver.kill("k")
    assert p.wait(timeout=10) == -signal.SIGKILL  # type: ignore[attr-defined]
    assert wait_for(lambda: all(dead(pid) for pid in pids), 10)
    assert driver.pids("k") == []


def test_pids_and_stats_see_processes(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    driver.create("pod/a", CgroupSpec())
    driver.create("pod/b", CgroupSpec())
    code = "import sys, time\nb = bytearray(48 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\nprint('ready', flush=True)\ntime.sleep(1000)"
    a = spawn("pod/a", python(code), stdout=-1)
    b = spawn("pod/b", ["sleep", "1000"])
    assert a.stdout.readline().strip() == "ready"  # type: ignore[attr-defined]
    assert driver.pids("pod/a") == [a.pid]  # type: ignore[attr-defined]
    assert driver.pids("pod") == sorted([a.pid, b.pid])  # type: ignore[attr-defined]
    stats = driver.stats("pod/a")
    assert stats.memory_usage >= 48 * MI
    assert stats.memory_anon >= 46 * MI
    assert stats.working_set <= stats.memory_usage
    assert stats.cpu_usage_usec > 0
    if has(driver, "pids"):
        assert stats.pids_current == 1
        assert driver.stats("pod").pids_current == 2


def test_joining_through_procs_files(driver: CgroupDriver, spawn: Callable[..., object], on_disk: Callable[[str], list[str]]) -> None:
    driver.create(CONTAINER, CgroupSpec())
    files = driver.procs_files(CONTAINER)
    assert len(files) == len(on_disk(CONTAINER)) >= 1
    driver.create("elsewhere", CgroupSpec())  # a leaf: v2 allows no processes in inner nodes
    p = spawn("elsewhere", ["sleep", "1000"])  # then moved, as add_process does
    driver.add_process(CONTAINER, p.pid)
    assert driver.pids(CONTAINER) == [p.pid]  # type: ignore[attr-defined]
    assert driver.pids("elsewhere") == []
    for f in files:
        with open(f) as fh:
            assert fh.read().split() == [str(p.pid)]  # type: ignore[attr-defined]


def test_remove_leaves_nothing(driver: CgroupDriver, spawn: Callable[..., object], on_disk: Callable[[str], list[str]]) -> None:
    driver.create("kubepods/burstable/pod1/app", LIMITED)
    driver.create("kubepods/burstable/pod1/side", CgroupSpec())
    spawn("kubepods/burstable/pod1/app", ["sleep", "1000"])
    driver.kill("kubepods/burstable/pod1")
    driver.remove("kubepods/burstable/pod1")  # may need to wait for the reaping: bounded retries
    assert on_disk("kubepods/burstable/pod1") == []
    assert not driver.exists("kubepods/burstable/pod1")
    assert driver.exists("kubepods/burstable") and driver.children("kubepods/burstable") == []
    driver.remove("kubepods/burstable/pod1")  # idempotent


def test_remove_refuses_a_populated_cgroup(driver: CgroupDriver, spawn: Callable[..., object]) -> None:
    driver.create("busy/app", CgroupSpec())
    spawn("busy/app", ["sleep", "1000"])
    driver.remove_timeout = 0.2  # type: ignore[attr-defined]
    with pytest.raises(CgroupError, match="processes still inside"):
        driver.remove("busy")
    assert driver.exists("busy/app")


def test_lowering_memory_below_usage(driver: CgroupDriver, spawn: Callable[..., object], kernel_file: KernelFile) -> None:
    """v1 refuses (EBUSY, limit unchanged); v2 reclaims and, failing that, OOM-kills."""
    driver.create("low", CgroupSpec(memory_max=256 * MI))
    code = "import time\nb = bytearray(100 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\nprint('ready', flush=True)\ntime.sleep(1000)"
    p = spawn("low", python(code), stdout=-1)
    assert p.stdout.readline().strip() == "ready"  # type: ignore[attr-defined]
    if driver.version == 1:
        with pytest.raises(CgroupError, match="usage"):
            driver.update("low", CgroupSpec(memory_max=32 * MI))
        assert kernel_file("low", "memory", "memory.limit_in_bytes") == str(256 * MI)
        assert p.poll() is None  # type: ignore[attr-defined]
    else:
        driver.update("low", CgroupSpec(memory_max=32 * MI))
        assert p.wait(timeout=30) == -signal.SIGKILL  # type: ignore[attr-defined]
        assert driver.stats("low").oom_kills >= 1


def test_hundred_container_cgroups(driver: CgroupDriver, on_disk: Callable[[str], list[str]]) -> None:
    """100 create+remove cycles of a container cgroup leak nothing (timing printed, not asserted)."""
    spec = CgroupSpec(cpu_shares=256, cpu_quota_us=50000, memory_max=64 * MI, pids_max=100)
    driver.create("kubepods/burstable/podbench", CgroupSpec())
    t0 = time.perf_counter()
    for i in range(100):
        driver.create(f"kubepods/burstable/podbench/c{i}", spec)
        driver.remove(f"kubepods/burstable/podbench/c{i}")
    elapsed = time.perf_counter() - t0
    print(f"\ncgroup v{driver.version}: 100 container create+remove in {elapsed * 1000:.1f} ms "
          f"({elapsed * 10:.2f} ms per cycle)")
    assert driver.children("kubepods/burstable/podbench") == []
    assert all(not os.listdir(d) or all(not os.path.isdir(os.path.join(d, n)) for n in os.listdir(d))
               for d in on_disk("kubepods/burstable/podbench"))
