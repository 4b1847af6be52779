"""What every CgroupDriver must do, as cases that run against any of them.

The same cases run against the fake in tests/fakes.py (tests/test_cgroup_conformance.py, in the
unit suite) and against the real drivers (integration/test_cgroup_conformance.py: v1 on the host,
v2 in the UML guest), so the fake cannot drift from the kernels it stands in for. A case only uses
the CgroupDriver protocol: what the kernel files hold is checked in integration/test_cgroup_drivers.py.

Each case takes a driver whose root is fresh and empty; the caller removes the root afterwards.
A case that needs a process starts its own (a sleep, moved with add_process) and ends it: the
real drivers move and kill it, the fake only records its pid.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec, CgroupStats
from nodeagent.core.errors import FieldError

MI = 1024 * 1024
POD = "kubepods/burstable/pod1234"
CONTAINER = f"{POD}/app"
LIMITED = CgroupSpec(cpu_shares=512, cpu_quota_us=20000, memory_max=64 * MI, memory_high=48 * MI, pids_max=50)

Case = Callable[[CgroupDriver], None]


def identity(driver: CgroupDriver) -> None:
    assert driver.version in (1, 2)
    assert driver.root.startswith("/")


def create_makes_the_parents_and_is_idempotent(driver: CgroupDriver) -> None:
    assert not driver.exists(CONTAINER)
    driver.create(CONTAINER, LIMITED)
    driver.create(CONTAINER, LIMITED)
    assert driver.exists(CONTAINER) and driver.exists(POD) and driver.exists("kubepods")
    assert driver.exists("")  # the root itself


def children_are_the_direct_ones_sorted(driver: CgroupDriver) -> None:
    for name in ("b", "a", "c/deeper"):
        driver.create(f"{POD}/{name}", CgroupSpec())
    assert driver.children(POD) == ["a", "b", "c"]
    assert driver.children("kubepods") == ["burstable"]
    assert driver.children(f"{POD}/a") == []


def update_changes_an_existing_cgroup_and_refuses_a_missing_one(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, LIMITED)
    driver.update(CONTAINER, CgroupSpec(cpu_shares=2048, memory_max=128 * MI))
    driver.update(CONTAINER, CgroupSpec())
    with pytest.raises(OSError):
        driver.update("nope", CgroupSpec())
    assert not driver.exists("nope")


def update_from_a_previous_spec_changes_only_what_moved_and_refuses_a_missing_cgroup(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, LIMITED)
    heavier = CgroupSpec(cpu_shares=3000, cpu_quota_us=20000, memory_max=64 * MI, memory_high=48 * MI, pids_max=50)
    driver.update(CONTAINER, heavier, previous=LIMITED)
    driver.update(CONTAINER, heavier, previous=heavier)  # nothing moved: nothing to write
    driver.update(CONTAINER, CgroupSpec(), previous=heavier)  # more than the weight: the full update
    with pytest.raises(OSError):
        driver.update("nope", heavier, previous=LIMITED)


def a_bad_spec_is_refused_before_anything_is_created(driver: CgroupDriver) -> None:
    for spec, field in ((CgroupSpec(cpu_shares=1), "cpu_shares"), (CgroupSpec(cpu_quota_us=999), "cpu_quota_us"),
                        (CgroupSpec(cpu_period_us=10), "cpu_period_us"), (CgroupSpec(memory_max=0), "memory_max"),
                        (CgroupSpec(memory_high=-1), "memory_high"), (CgroupSpec(pids_max=-1), "pids_max")):
        with pytest.raises(FieldError, match=field):
            driver.create("bad", spec)
        assert not driver.exists("bad")
    driver.create("good", CgroupSpec())
    with pytest.raises(FieldError, match="memory_max"):
        driver.update("good", CgroupSpec(memory_max=0))


def paths_cannot_leave_the_root(driver: CgroupDriver) -> None:
    for path in ("../escape", "a/../../b", "./x", "a\0b"):
        with pytest.raises(FieldError):
            driver.create(path, CgroupSpec())


def remove_takes_the_subtree_and_is_idempotent(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, LIMITED)
    driver.create(f"{POD}/side", CgroupSpec())
    driver.remove(POD)
    assert not driver.exists(POD) and not driver.exists(CONTAINER)
    assert driver.exists("kubepods/burstable") and driver.children("kubepods/burstable") == []
    driver.remove(POD)


def the_root_itself_is_never_the_hierarchy_root(driver: CgroupDriver) -> None:
    """kill("") and remove("") act on the agent's own root, which the caller made (not the mount)."""
    driver.create("x", CgroupSpec())
    driver.kill("")
    driver.remove("x")
    assert driver.children("") == []


def a_new_cgroup_reads_empty(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, LIMITED)
    stats = driver.stats(CONTAINER)
    assert isinstance(stats, CgroupStats)
    assert (stats.oom_kills, stats.oom_events, stats.pids_current) == (0, 0, 0)
    assert stats.working_set >= 0
    usage, inactive_file = driver.memory_usage(CONTAINER)
    assert isinstance(usage, int) and isinstance(inactive_file, int) and inactive_file >= 0
    assert driver.oom_kill_count(POD) == 0
    assert driver.pids(POD) == []


def reading_a_missing_cgroup_is_an_oserror(driver: CgroupDriver) -> None:
    for read in (driver.stats, driver.memory_usage, driver.oom_kill_count):
        with pytest.raises(OSError):
            read("missing")


def killing_an_empty_or_missing_cgroup_does_nothing(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, CgroupSpec())
    driver.kill(POD)
    driver.kill("missing")
    assert driver.exists(CONTAINER)


def procs_files_are_absolute_cgroup_procs_files(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, CgroupSpec())
    for f in driver.procs_files(CONTAINER):
        assert os.path.isabs(f) and f.endswith(f"/{CONTAINER}/cgroup.procs"), f


def memory_dir_is_the_cgroup_in_the_memory_hierarchy(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, CgroupSpec())
    d = driver.memory_dir(CONTAINER)
    memory = driver.hierarchy("memory")
    assert memory is not None and os.path.isabs(d)
    rel = "/".join(p for p in (driver.root.strip("/"), CONTAINER) if p)
    assert d == os.path.join(memory, rel)


def hierarchy_names_where_each_controller_lives(driver: CgroupDriver) -> None:
    memory = driver.hierarchy("memory")
    assert memory is not None and os.path.isabs(memory)  # every driver needs memory
    assert driver.hierarchy("no-such-controller") is None
    if driver.version == 2:  # one unified hierarchy
        assert {driver.hierarchy(c) for c in ("cpu", "memory", "pids")} - {None} == {memory}


def add_process_moves_a_process_that_pids_lists_until_kill(driver: CgroupDriver) -> None:
    driver.create(CONTAINER, CgroupSpec())
    driver.create(f"{POD}/side", CgroupSpec())
    sleeper = subprocess.Popen(["sleep", "1000"])
    try:
        driver.add_process(CONTAINER, sleeper.pid)
        assert driver.pids(CONTAINER) == [sleeper.pid]
        assert driver.pids(POD) == [sleeper.pid]  # descendants count
        assert driver.pids(f"{POD}/side") == []
        driver.kill(POD)
        sleeper.kill()  # the real drivers have killed it; the fake never signals
        sleeper.wait(timeout=10)
        assert driver.pids(POD) == []
        driver.remove(POD)  # empty again: it can go
        assert not driver.exists(POD)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def add_process_to_a_missing_or_escaping_cgroup_is_refused(driver: CgroupDriver) -> None:
    """Refused before anything moves: OSError for a cgroup that is not there (nothing is
    created for it), FieldError for a path that would leave the root."""
    pid = os.getpid()  # never moved: each call fails first
    with pytest.raises(OSError):
        driver.add_process("missing", pid)
    assert not driver.exists("missing")
    for path in ("../escape", "a/../../b", "a\0b"):
        with pytest.raises(FieldError):
            driver.add_process(path, pid)


USAGE_FILES = {2: ("cpu.stat", "memory.current", "memory.stat"), 1: ("cpuacct.usage", "memory.usage_in_bytes", "memory.stat")}


def usage_files_name_the_cgroups_own_files_without_io(driver: CgroupDriver) -> None:
    """What the sampler opens: absolute paths in the cgroup's own directory, named as this
    version's kernel names them; computed, not looked up, so a missing cgroup gets them too (and
    is not created). No CPU file only where a v1 host has no cpuacct hierarchy."""
    driver.create(CONTAINER, CgroupSpec())
    for path in (CONTAINER, "missing"):
        files = driver.usage_files(path)
        assert files.version == driver.version
        cpu, memory, memory_stat = USAGE_FILES[driver.version]
        named = [(files.memory, memory), (files.memory_stat, memory_stat)]
        if files.cpu is None:
            assert driver.version == 1 and driver.hierarchy("cpuacct") is None
        else:
            named.append((files.cpu, cpu))
        for f, name in named:
            assert os.path.isabs(f) and f.endswith(f"/{path}/{name}"), f
        assert os.path.dirname(files.memory) == os.path.dirname(files.memory_stat)
    assert not driver.exists("missing")


CASES: dict[str, Case] = {f.__name__: f for f in (
    identity,
    create_makes_the_parents_and_is_idempotent,
    children_are_the_direct_ones_sorted,
    update_changes_an_existing_cgroup_and_refuses_a_missing_one,
    update_from_a_previous_spec_changes_only_what_moved_and_refuses_a_missing_cgroup,
    a_bad_spec_is_refused_before_anything_is_created,
    paths_cannot_leave_the_root,
    remove_takes_the_subtree_and_is_idempotent,
    the_root_itself_is_never_the_hierarchy_root,
    a_new_cgroup_reads_empty,
    reading_a_missing_cgroup_is_an_oserror,
    killing_an_empty_or_missing_cgroup_does_nothing,
    procs_files_are_absolute_cgroup_procs_files,
    memory_dir_is_the_cgroup_in_the_memory_hierarchy,
    hierarchy_names_where_each_controller_lives,
    add_process_moves_a_process_that_pids_lists_until_kill,
    add_process_to_a_missing_or_escaping_cgroup_is_refused,
    usage_files_name_the_cgroups_own_files_without_io,
)}
