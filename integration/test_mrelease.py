"""process_mrelease after the supervisor's SIGKILL, on a real kernel: the victim's memory is
freed by the agent while the victim itself has not run its exit path yet.

Host (cgroup v1):      .venv/bin/pytest integration/test_mrelease.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_mrelease.py -q

The container (a cgroup of this test's own) allocates and touches 200 MiB, then spins; its cgroup
is then throttled to 1 ms of CPU a second, so once killed it cannot run its exit path for up to a
second: a throttled victim is the case process_mrelease is for. The ContainerWorker stops it as a
hard eviction does (grace 0). The releaser is the real one over libc's syscall(2) (first waiting
RELEASE_AFTER_S for an exit, as in the agent), wrapped to
record, in its thread, what the kernel answered and the cgroup's memory just before and after.
Without the call the record stays empty; with it, the memory is gone while the victim still is
not a zombie. Then the throttle is lifted so the victim exits and the stop completes.
"""

from __future__ import annotations

import asyncio
import errno
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.cgroups.driver import CgroupDriver, CgroupSpec
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.cgroup_handle import DriverCgroup
from nodeagent.agent.runtime.mrelease import MemoryReleaser, libc_syscall
from nodeagent.agent.runtime.spawn import DEFAULT_PATH, LaunchSpec
from nodeagent.agent.runtime.state import Running, Terminated
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker

MI = 1024 * 1024
HOG = 200 * MI
FREED_AT_LEAST = 150 * MI
HOG_SCRIPT = f"""
import signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a SIGTERM that would end it marks it dying already
b = bytearray({HOG})  # zero-filled: every page touched
b[::4096] = b"\\x01" * len(range(0, {HOG}, 4096))
open(sys.argv[1], "w").close()
while True:
    pass
"""


def fdinfo_pid(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pid:"))


def proc_state(pid: int) -> str:
    """The one-letter state in /proc/<pid>/stat; "gone" once reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    return data[data.rindex(")") + 2]


async def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_the_victims_memory_is_released_before_it_runs_its_exit(driver: CgroupDriver, tmp_path: Path) -> None:
    real = libc_syscall()
    if real is None:
        pytest.skip("no process_mrelease syscall number for this architecture")
    if real(-1, 0)[1] != errno.EBADF:  # the kernel has the call (ENOSYS otherwise)
        pytest.skip("this kernel has no process_mrelease")
    path = "mrelease/hog"
    driver.create(path, CgroupSpec(memory_max=512 * MI))
    calls: list[dict[str, Any]] = []

    def recording(pidfd: int, flags: int) -> tuple[int, int]:
        pid = fdinfo_pid(pidfd)
        before = driver.memory_usage(path)[0]
        ret, err = real(pidfd, flags)
        after = driver.memory_usage(path)[0]
        calls.append(dict(pid=pid, ret=ret, errno=err, before=before, after=after, state_after=proc_state(pid)))
        # measured: lift the throttle so it exits now (its CPU debt would hold it for seconds at HZ=100)
        driver.update(path, CgroupSpec(memory_max=512 * MI))
        return ret, err

    ready = tmp_path / "ready"
    config = ContainerConfig(
        name="hog", launch=LaunchSpec((sys.executable, "-c", HOG_SCRIPT, str(ready)), {"PATH": DEFAULT_PATH}),
        log_dir=logs.container_log_dir(str(tmp_path / "state"), "default", "hog", "uid-mrelease", "hog"),
        restart_policy="Never", pod_name="hog", pod_uid="uid-mrelease")
    worker = ContainerWorker(config, DriverCgroup(driver, path), releaser=MemoryReleaser(recording))
    task = asyncio.ensure_future(worker.run())
    try:
        await wait_for(lambda: ready.exists())
        assert isinstance(worker.status.state, Running)
        pid = worker.pid
        assert pid is not None
        usage = driver.memory_usage(path)[0]
        assert usage >= HOG, usage
        # throttle it: 1 ms a second, then wait until the kernel has throttled it at least twice,
        # so the kill below lands in a throttled stretch (999 ms of each second)
        driver.update(path, CgroupSpec(memory_max=512 * MI, cpu_quota_us=1000, cpu_period_us=1_000_000))
        throttled = driver.stats(path).cpu_nr_throttled
        await wait_for(lambda: driver.stats(path).cpu_nr_throttled >= throttled + 2, timeout=10)
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        status = await worker.stop(0)
        stopped_in = time.monotonic() - t0
    finally:
        await worker.stop(0)
        await asyncio.wait_for(task, 30)
    assert isinstance(status.state, Terminated) and status.state.exit_code == 137, status.state
    print(f"calls={calls} stop took {stopped_in:.3f}s")
    assert [c["pid"] for c in calls] == [pid], calls  # called once, on the victim, before its reaping
    (call,) = calls
    assert (call["ret"], call["errno"]) == (0, 0), call
    assert call["before"] - call["after"] >= FREED_AT_LEAST, call
    # still not a zombie when its memory was already gone: the agent freed it, not its exit path
    assert call["state_after"] not in ("Z", "X", "gone"), call
