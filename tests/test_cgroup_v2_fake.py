"""The cgroup drivers without a kernel: v2 (and a co-mounted v1) on fake trees, and detection.

A fake tree is plain directories and files laid out like cgroupfs. It cannot prove kernel
behaviour (the integration suite does), but it pins down what the drivers write where: in
particular that nothing above the agent root is written except missing subtree_control entries.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodeagent.agent.cgroups.common import CgroupError
from nodeagent.agent.cgroups.detect import CgroupMounts, detect_version, make_driver, parse_mounts
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.cgroups.v1 import CgroupV1Driver
from nodeagent.agent.cgroups.v2 import CgroupV2Driver
from nodeagent.core.errors import FieldError

MI = 1024 * 1024
V2_LEAF_FILES = ("cpu.weight", "cpu.max", "memory.max", "memory.high", "memory.swap.max", "pids.max")


def cg(path: Path, controllers: str = "cpu memory pids", subtree: str = "", files: tuple[str, ...] = ()) -> Path:
    """A fake v2 cgroup directory."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(subtree + "\n")
    (path / "cgroup.procs").write_text("")
    for name in files:
        (path / name).write_text("")
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """mount (everything enabled already) / agent (everything enabled) / pod / app (a leaf).

    Consistent like a kernel's: a child's cgroup.controllers is its parent's subtree_control.
    """
    mount = cg(tmp_path / "mnt", "cpuset cpu io memory pids", "cpu io memory pids")
    cg(mount / "agent", "cpu io memory pids", "cpu memory pids")
    cg(mount / "agent" / "pod", "cpu memory pids", "")
    cg(mount / "agent" / "pod" / "app", "", files=V2_LEAF_FILES)
    return mount


def test_create_writes_every_value(tree: Path) -> None:
    drv = CgroupV2Driver(mount=str(tree), root="/agent")
    drv.create("pod/app", CgroupSpec(cpu_shares=1024, cpu_quota_us=50000, memory_max=64 * MI,
                                     memory_high=48 * MI, pids_max=10))
    leaf = tree / "agent" / "pod" / "app"
    assert {n: (leaf / n).read_text() for n in V2_LEAF_FILES} == {
        "cpu.weight": "100",  # quadratic map: one CPU of requests = a default service
        "cpu.max": "50000 100000",
        "memory.max": str(64 * MI),
        "memory.high": str(48 * MI),
        "memory.swap.max": "0",
        "pids.max": "10",
    }


def test_unlimited_spec_writes_max_and_default_weight(tree: Path) -> None:
    drv = CgroupV2Driver(mount=str(tree), root="/agent")
    drv.create("pod/app", CgroupSpec(cpu_period_us=50000))
    leaf = tree / "agent" / "pod" / "app"
    assert {n: (leaf / n).read_text() for n in V2_LEAF_FILES} == {
        "cpu.weight": "100", "cpu.max": "max 50000", "memory.max": "max", "memory.high": "max",
        "memory.swap.max": "max", "pids.max": "max",
    }


def test_ancestors_already_enabled_are_not_written(tree: Path) -> None:
    """The parent receives every controller: only its own subtree_control may need a write."""
    watched = [tree / "cgroup.subtree_control", tree / "agent" / "cgroup.subtree_control"]
    before = [(f.read_text(), f.stat().st_mtime_ns) for f in watched]
    CgroupV2Driver(mount=str(tree), root="/agent").create("pod/app", CgroupSpec())
    assert [(f.read_text(), f.stat().st_mtime_ns) for f in watched] == before
    assert (tree / "agent" / "pod" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (tree / "agent" / "pod" / "app" / "cgroup.subtree_control").read_text() == "\n"  # the leaf


def test_each_ancestor_gets_exactly_its_missing_tokens(tmp_path: Path) -> None:
    mount = cg(tmp_path / "mnt", "cpu io memory pids", "cpu io memory")  # pids not yet enabled
    cg(mount / "agent", "cpu io memory", "cpu")
    cg(mount / "agent" / "pod", "cpu", "")
    drv = CgroupV2Driver(mount=str(mount), root="/agent")
    drv.create("pod/app", CgroupSpec())
    assert (mount / "cgroup.subtree_control").read_text() == "+pids"
    assert (mount / "agent" / "cgroup.subtree_control").read_text() == "+memory"  # fake: no pids yet
    assert (mount / "agent" / "pod" / "cgroup.subtree_control").read_text() == "+cpu"


def test_missing_ancestors_are_created(tmp_path: Path) -> None:
    mount = cg(tmp_path / "mnt", "cpu memory pids", "cpu memory pids")
    CgroupV2Driver(mount=str(mount), root="/agent").create("kubepods/burstable/pod1/app", CgroupSpec())
    assert (mount / "agent" / "kubepods" / "burstable" / "pod1" / "app").is_dir()


def test_unavailable_controller_is_skipped_with_a_warning(tmp_path: Path) -> None:
    mount = cg(tmp_path / "mnt", "cpu pids", "cpu pids")
    cg(mount / "agent" / "app", controllers="cpu pids", files=("cpu.weight", "cpu.max", "pids.max"))
    drv = CgroupV2Driver(mount=str(mount), root="/agent")
    with capture_logs() as logs:
        drv.create("app", CgroupSpec(memory_max=64 * MI))
    assert not (mount / "agent" / "app" / "memory.max").exists()
    assert [e["file"] for e in logs if e["event"] == "cgroup_controller_unavailable"] == ["memory.max"]


def test_stats_parse_the_kernel_files(tree: Path) -> None:
    leaf = tree / "agent" / "pod" / "app"
    (leaf / "memory.current").write_text("1000000\n")
    (leaf / "memory.stat").write_text("anon 600000\nfile 300000\nkernel 1\ninactive_file 200000\nactive_file 100000\n")
    (leaf / "memory.events").write_text("low 0\nhigh 7\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n")
    (leaf / "cpu.stat").write_text("usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 9\n"
                                   "nr_throttled 4\nthrottled_usec 800\n")
    (leaf / "pids.current").write_text("3\n")
    s = CgroupV2Driver(mount=str(tree), root="/agent").stats("pod/app")
    assert (s.memory_usage, s.memory_anon, s.memory_file, s.memory_inactive_file) == (1000000, 600000, 300000, 200000)
    assert s.working_set == 800000
    assert (s.oom_events, s.oom_kills) == (2, 1)
    assert (s.cpu_usage_usec, s.cpu_nr_throttled, s.cpu_throttled_usec, s.pids_current) == (5000, 4, 800, 3)
    assert s.extra["memory_events_high"] == 7 and s.extra["cpu_nr_periods"] == 9


def test_pids_are_collected_recursively(tree: Path) -> None:
    (tree / "agent" / "pod" / "cgroup.procs").write_text("")
    (tree / "agent" / "pod" / "app" / "cgroup.procs").write_text("30\n10\n")
    cg(tree / "agent" / "pod" / "side").joinpath("cgroup.procs").write_text("20\n")
    drv = CgroupV2Driver(mount=str(tree), root="/agent")
    assert drv.pids("pod") == [10, 20, 30]
    assert drv.pids("pod/side") == [20]
    assert drv.children("pod") == ["app", "side"]


def test_kill_uses_cgroup_kill_when_present(tree: Path) -> None:
    leaf = tree / "agent" / "pod" / "app"
    (leaf / "cgroup.kill").write_text("")
    drv = CgroupV2Driver(mount=str(tree), root="/agent", kill_timeout=0.05)
    drv.kill("pod/app")
    assert (leaf / "cgroup.kill").read_text() == "1"


def test_kill_without_cgroup_kill_signals_each_pid(tree: Path) -> None:
    """Kernels < 5.14: SIGKILL every PID listed (a fake tree never empties: the wait times out)."""
    p = subprocess.Popen(["sleep", "1000"])
    try:
        (tree / "agent" / "pod" / "app" / "cgroup.procs").write_text(f"{p.pid}\n")
        drv = CgroupV2Driver(mount=str(tree), root="/agent", kill_timeout=0.1)
        with capture_logs() as logs:
            drv.kill("pod")
        assert p.wait(timeout=10) == -signal.SIGKILL
        assert any(e["event"] == "cgroup_kill_timeout" for e in logs)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_root_of_the_hierarchy_is_never_killed_or_removed(tree: Path) -> None:
    drv = CgroupV2Driver(mount=str(tree), root="/")
    with pytest.raises(ValueError, match="refusing"):
        drv.kill("")
    with pytest.raises(ValueError, match="refusing"):
        drv.remove("/")


@pytest.mark.parametrize("path", ["..", "a/../../etc", "./a", "a/./b"])
def test_paths_cannot_escape(tree: Path, path: str) -> None:
    drv = CgroupV2Driver(mount=str(tree), root="/agent")
    with pytest.raises(FieldError, match="path"):
        drv.create(path, CgroupSpec())
    with pytest.raises(FieldError, match="root"):
        CgroupV2Driver(mount=str(tree), root=f"/agent/{path}")


def test_update_of_missing_cgroup_and_bad_spec(tree: Path) -> None:
    drv = CgroupV2Driver(mount=str(tree), root="/agent")
    with pytest.raises(CgroupError):
        drv.update("nope", CgroupSpec())
    with pytest.raises(FieldError, match="cpu_quota_us"):
        drv.create("pod/app", CgroupSpec(cpu_quota_us=10))
    assert (tree / "agent" / "pod" / "app" / "cpu.max").read_text() == ""  # nothing written


# -- v1 with cpu and cpuacct co-mounted ---------------------------------------------------------


def test_v1_comounted_cpu_cpuacct(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu,cpuacct"
    hierarchies = {"cpu": str(cpu), "cpuacct": str(cpu), "memory": str(tmp_path / "memory"),
                   "pids": str(tmp_path / "pids")}
    for name in ("cpu,cpuacct", "memory", "pids"):
        (tmp_path / name / "agent" / "app").mkdir(parents=True)
    app_cpu = cpu / "agent" / "app"
    for f, v in {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1",
                 "cpuacct.usage": "7000000", "cgroup.procs": "5\n",
                 "cpu.stat": "nr_periods 3\nnr_throttled 2\nthrottled_time 4000000"}.items():
        (app_cpu / f).write_text(v)
    app_mem = tmp_path / "memory" / "agent" / "app"
    for f, v in {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "4096",
                 "memory.stat": "total_rss 100\ntotal_cache 50\ntotal_inactive_file 20",
                 "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2",
                 "memory.failcnt": "0", "cgroup.procs": "5\n"}.items():
        (app_mem / f).write_text(v)
    for f, v in {"pids.max": "max", "pids.current": "1", "cgroup.procs": "5\n"}.items():
        (tmp_path / "pids" / "agent" / "app" / f).write_text(v)

    drv = CgroupV1Driver(mount=str(tmp_path), root="/agent", hierarchies=hierarchies)
    assert len(drv.procs_files("app")) == 3  # cpu and cpuacct share one directory
    drv.update("app", CgroupSpec(cpu_shares=256, cpu_quota_us=30000, memory_max=8 * MI, pids_max=9))
    assert (app_cpu / "cpu.shares").read_text() == "256"
    assert (app_cpu / "cpu.cfs_quota_us").read_text() == "30000"
    assert (app_mem / "memory.limit_in_bytes").read_text() == str(8 * MI)
    assert (tmp_path / "pids" / "agent" / "app" / "pids.max").read_text() == "9"
    s = drv.stats("app")
    assert (s.cpu_usage_usec, s.cpu_nr_throttled, s.cpu_throttled_usec) == (7000, 2, 4000)
    assert (s.memory_usage, s.memory_anon, s.memory_file, s.memory_inactive_file) == (4096, 100, 50, 20)
    assert (s.oom_kills, s.pids_current) == (2, 1)
    assert drv.pids("app") == [5]


# -- detection (pure) ---------------------------------------------------------------------------

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
PURE_V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
COMOUNTED = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n" \
            "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"


def test_parse_mounts() -> None:
    assert parse_mounts(HYBRID) == CgroupMounts(
        v2="/sys/fs/cgroup/unified",
        v1={"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct",
            "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"},
    )
    assert parse_mounts(COMOUNTED).v1["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert parse_mounts("cgroup2 /a\\040b cgroup2 rw 0 0\n").v2 == "/a b"


@pytest.mark.parametrize(
    ("mounts", "controllers", "version"),
    [
        (HYBRID, None, 1),
        (HYBRID, "", 1),  # the unified mount of a hybrid host has no cpu/memory
        (PURE_V2, None, 2),
        (PURE_V2, "cpuset cpu io memory hugetlb pids rdma misc", 2),
        (COMOUNTED, None, 1),
        (PURE_V2 + COMOUNTED, "io pids", 1),
    ],
)
def test_detect_version(mounts: str, controllers: str | None, version: int) -> None:
    assert detect_version(mounts, controllers) == version


@pytest.mark.parametrize(("mounts", "controllers"), [("", None), (PURE_V2, "io pids")])
def test_detect_without_a_usable_hierarchy(mounts: str, controllers: str | None) -> None:
    with pytest.raises(ValueError, match="no usable cgroup hierarchy"):
        detect_version(mounts, controllers)


def test_make_driver_from_a_mount_table(tmp_path: Path) -> None:
    cg(tmp_path, "cpu memory pids")
    drv = make_driver("auto", "/agent", mounts_text=f"cgroup2 {tmp_path} cgroup2 rw 0 0\n")
    assert isinstance(drv, CgroupV2Driver) and drv.mount == str(tmp_path) and drv.root == "/agent"
    v1 = make_driver("v1", "agent/x", mounts_text=HYBRID)
    assert isinstance(v1, CgroupV1Driver) and v1.root == "/agent/x"
    assert v1.hierarchies["pids"] == "/sys/fs/cgroup/pids"  # type: ignore[attr-defined]


def test_make_driver_refuses_what_the_host_cannot_do(tmp_path: Path) -> None:
    cg(tmp_path, "io pids")
    with pytest.raises(FieldError, match="cgroup_driver"):
        make_driver("v2", "/", mounts_text=f"cgroup2 {tmp_path} cgroup2 rw 0 0\n")
    with pytest.raises(FieldError, match="cgroup_driver"):
        make_driver("v1", "/", mounts_text=PURE_V2)
    with pytest.raises(FieldError, match="cgroup_driver"):
        make_driver("cgroupfs", "/", mounts_text=HYBRID)
    assert os.path.exists(tmp_path / "cgroup.controllers")
