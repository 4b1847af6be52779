"""process_mrelease after a SIGKILL (runtime/mrelease.py, supervisor.py): the errno table, the
"unsupported" state learnt once, never raising, the blocking call off the event loop with its own
duplicate of the pidfd, and the supervisor calling it after its SIGKILL only."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodeagent.agent.runtime.mrelease import (
    RELEASE_AFTER_S,
    MemoryReleaser,
    Outcome,
    Syscall,
    libc_syscall,
    outcome_of,
    releaser_from_env,
)
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.agent.runtime.state import Running, Terminated
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker


@pytest.mark.parametrize(("ret", "err", "outcome"), [
    (0, 0, Outcome.RELEASED),
    (0, errno.EINVAL, Outcome.RELEASED),  # a stale errno after success means nothing
    (-1, errno.EINVAL, Outcome.NOT_DYING),
    (-1, errno.ESRCH, Outcome.GONE),
    (-1, errno.EAGAIN, Outcome.BUSY),
    (-1, errno.EINTR, Outcome.INTERRUPTED),
    (-1, errno.ENOSYS, Outcome.UNSUPPORTED),
    (-1, errno.EBADF, Outcome.FAILED),
    (-1, errno.EPERM, Outcome.FAILED),
])
def test_outcome_of_each_errno(ret: int, err: int, outcome: Outcome) -> None:
    assert outcome_of(ret, err) is outcome


class FakeSyscall:
    """Answers from a list of (ret, errno), recording each (pidfd, flags) it was called with."""

    def __init__(self, *answers: tuple[int, int]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, pidfd: int, flags: int) -> tuple[int, int]:
        self.calls.append((pidfd, flags))
        return self.answers.pop(0) if self.answers else (0, 0)


def events(logs: list[dict[str, object]], level: str | None = None) -> list[object]:
    return [e["event"] for e in logs if level is None or e["log_level"] == level]


def test_normal_answers_log_nothing_above_debug() -> None:
    fake = FakeSyscall((0, 0), (-1, errno.EINVAL), (-1, errno.ESRCH), (-1, errno.EAGAIN))
    r = MemoryReleaser(fake)
    with capture_logs() as logs:
        got = [r.release(7, pid=100 + i) for i in range(4)]
    assert got == [Outcome.RELEASED, Outcome.NOT_DYING, Outcome.GONE, Outcome.BUSY]
    assert fake.calls == [(7, 0)] * 4  # flags must be 0
    assert [e for e in logs if e["log_level"] != "debug"] == []
    assert events(logs) == ["process_mrelease"] * 4
    assert r.supported


def test_enosys_is_learnt_once_and_never_tried_again() -> None:
    fake = FakeSyscall((-1, errno.ENOSYS))
    r = MemoryReleaser(fake)
    with capture_logs() as logs:
        assert r.release(7) is Outcome.UNSUPPORTED
        assert r.release(7) is Outcome.UNSUPPORTED
        assert r.release_soon(7) is None  # no thread, no dup
    assert len(fake.calls) == 1
    assert not r.supported
    assert events(logs, "info") == ["process_mrelease_unsupported"]


def test_no_syscall_here_is_unsupported_from_the_start() -> None:
    with capture_logs() as logs:
        r = MemoryReleaser(None)
        assert r.release(7) is Outcome.UNSUPPORTED
        assert r.release_soon(7) is None
    assert events(logs, "info") == ["process_mrelease_unsupported"]
    assert libc_syscall("alpha") is None  # its number differs: never guessed


@pytest.mark.parametrize(("value", "supported"), [("off", False), (" OFF ", False), ("on", True), ("", True),
                                                  (None, True), ("no", True)])
def test_nodeagent_mrelease_off_leaves_the_call_out(value: str | None, supported: bool) -> None:
    env = {} if value is None else {"NODEAGENT_MRELEASE": value}
    with capture_logs() as logs:
        r = releaser_from_env(env)
    assert r.supported is (supported and libc_syscall() is not None)
    if not supported:
        assert r.release(7) is Outcome.UNSUPPORTED
        assert [e["reason"] for e in logs if e["event"] == "process_mrelease_unsupported"] == ["NODEAGENT_MRELEASE=off"]


def test_an_unexpected_errno_is_logged_once_per_value_and_never_raised() -> None:
    def boom(pidfd: int, flags: int) -> tuple[int, int]:
        raise OSError(errno.EFAULT, "boom")

    fake = FakeSyscall((-1, errno.EBADF), (-1, errno.EBADF), (-1, errno.EPERM))
    r = MemoryReleaser(fake)
    with capture_logs() as logs:
        assert [r.release(7) for _ in range(3)] == [Outcome.FAILED] * 3
        assert MemoryReleaser(boom).release(7) is Outcome.FAILED
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["event"], e["errno"]) for e in warnings] == [
        ("process_mrelease_failed", errno.EBADF), ("process_mrelease_failed", errno.EPERM),
        ("process_mrelease_failed", errno.EFAULT)]
    assert r.supported  # still worth trying


def test_libc_syscall_reaches_the_kernel() -> None:
    call = libc_syscall("x86_64")
    assert call is not None
    ret, err = call(-1, 0)
    assert ret == -1 and err in (errno.EBADF, errno.ENOSYS)  # a kernel with it answers EBADF


def fdinfo_pid(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pid:"))


def test_release_soon_works_on_a_duplicate_the_caller_may_close_at_once() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        pidfd = os.pidfd_open(proc.pid)
        entered, go = threading.Event(), threading.Event()
        seen: list[tuple[int, int, str]] = []

        def blocking(fd: int, flags: int) -> tuple[int, int]:
            entered.set()
            go.wait(10)
            seen.append((fd, fdinfo_pid(fd), threading.current_thread().name))
            return 0, 0

        r = MemoryReleaser(blocking)
        future = r.release_soon(pidfd, proc.pid)
        assert future is not None
        assert entered.wait(10)
        os.close(pidfd)  # as _on_exit may, while the call is still running
        go.set()
        assert future.result(10) is Outcome.RELEASED
        (fd, pid, thread), = seen
        assert fd != pidfd and pid == proc.pid
        assert thread.startswith("mrelease")
        with pytest.raises(OSError):
            os.fstat(fd)  # the duplicate is closed once the call returned
    finally:
        proc.kill()
        proc.wait()


# ---- the supervisor's stop path


class FileCgroup:
    def __init__(self, path: Path) -> None:
        path.write_text("")
        self.files = [str(path)]

    def procs_files(self) -> list[str]:
        return self.files

    def kill(self) -> None:
        pass

    def oom_kills(self) -> int:
        return 0


class SpyReleaser(MemoryReleaser):
    """Records, on the loop thread at the moment of the call, which process the pidfd names."""

    def __init__(self, syscall: Syscall | None = None, after: float = 0.0) -> None:
        self.syscall = syscall or FakeSyscall()
        super().__init__(self.syscall, after=after)
        self.asked: list[tuple[int, int | None]] = []
        self.futures: list[Future[Outcome]] = []

    def release_soon(self, pidfd: int, pid: int | None = None) -> Future[Outcome] | None:
        self.asked.append((fdinfo_pid(pidfd), pid))
        future = super().release_soon(pidfd, pid)
        if future is not None:
            self.futures.append(future)
        return future


IGNORES_SIGTERM = ("/bin/sh", "-c", "trap '' TERM; sleep 30 & wait")  # only a SIGKILL ends it


def ignores_sigterm(pid: int | None) -> bool:
    """The shell has run its trap (Running comes before: once it is in its cgroup)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (15 - 1)))


def config(tmp_path: Path, argv: tuple[str, ...]) -> ContainerConfig:
    return ContainerConfig(name="c", launch=LaunchSpec(argv), log_dir=str(tmp_path / "logs"),
                           restart_policy="Never", pod_name="p")


async def until(fn, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)
    return value


async def test_a_kill_with_grace_zero_releases_the_victims_memory(tmp_path: Path) -> None:
    spy = SpyReleaser()
    w = ContainerWorker(config(tmp_path, IGNORES_SIGTERM), FileCgroup(tmp_path / "cgroup.procs"), releaser=spy)
    task = asyncio.create_task(w.run())
    await until(lambda: isinstance(w.status.state, Running) and ignores_sigterm(w.pid))
    pid = w.pid
    await w.stop(0)
    await task
    assert spy.asked == [(pid, pid)]  # the pidfd named the victim, not yet reaped
    assert [f.result(10) for f in spy.futures] == [Outcome.RELEASED]


async def test_a_victim_that_exits_within_the_wait_is_left_to_its_exit_path(tmp_path: Path) -> None:
    """The call waits `after` (RELEASE_AFTER_S by default) for the exit first; 5 s here, so that
    the killed shell exits within it even on a loaded machine: the kernel is not asked at all."""
    assert MemoryReleaser(None)._after == RELEASE_AFTER_S
    spy = SpyReleaser(after=5.0)
    w = ContainerWorker(config(tmp_path, IGNORES_SIGTERM), FileCgroup(tmp_path / "cgroup.procs"), releaser=spy)
    task = asyncio.create_task(w.run())
    await until(lambda: isinstance(w.status.state, Running) and ignores_sigterm(w.pid))
    await w.stop(0)
    await task
    assert [f.result(10) for f in spy.futures] == [Outcome.EXITED]
    assert isinstance(spy.syscall, FakeSyscall) and spy.syscall.calls == []


def test_a_process_still_alive_after_the_wait_is_released() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        pidfd = os.pidfd_open(proc.pid)
        fake = FakeSyscall()
        r = MemoryReleaser(fake, after=0.05)
        t0 = time.monotonic()
        future = r.release_soon(pidfd, proc.pid)
        assert future is not None and future.result(10) is Outcome.RELEASED
        assert time.monotonic() - t0 >= 0.05
        assert len(fake.calls) == 1
        os.close(pidfd)
    finally:
        proc.kill()
        proc.wait()


async def test_kill_now_kills_and_releases_at_once_and_stop_sends_nothing_more(tmp_path: Path) -> None:
    """A hard eviction: SIGKILL and mrelease before the stop path, which then only waits (no
    SIGTERM, no second kill or release), and the container is not restarted."""
    spy = SpyReleaser()
    cfg = ContainerConfig(name="c", launch=LaunchSpec(("sleep", "30")), log_dir=str(tmp_path / "logs"),
                          restart_policy="Always", pod_name="p")
    w = ContainerWorker(cfg, FileCgroup(tmp_path / "cgroup.procs"), releaser=spy)
    task = asyncio.create_task(w.run())
    await until(lambda: isinstance(w.status.state, Running))
    pid = w.pid
    with capture_logs() as logs:
        w.kill_now()
        assert spy.asked == [(pid, pid)]  # at once, before anything awaits
        w.kill_now()  # idempotent
        status = await w.stop(30)  # would wait 30 s for a SIGTERM: the kill is already sent
    await task
    assert spy.asked == [(pid, pid)]
    assert isinstance(status.state, Terminated) and status.state.signal == 9
    events = [e["event"] for e in logs if e["event"].startswith("container_")]
    assert events == ["container_killed", "container_exited"]  # no container_stopping, no grace expiry
    assert status.restart_count == 0


async def test_no_release_when_sigterm_was_enough(tmp_path: Path) -> None:
    spy = SpyReleaser()
    w = ContainerWorker(config(tmp_path, ("sleep", "30")), FileCgroup(tmp_path / "cgroup.procs"), releaser=spy)
    task = asyncio.create_task(w.run())
    await until(lambda: isinstance(w.status.state, Running))
    await w.stop(10)
    await task
    assert spy.asked == []


async def test_a_slow_release_never_holds_up_the_stop(tmp_path: Path) -> None:
    entered, go = threading.Event(), threading.Event()

    def slow(fd: int, flags: int) -> tuple[int, int]:
        entered.set()
        go.wait(30)
        return 0, 0

    r = SpyReleaser(slow)
    w = ContainerWorker(config(tmp_path, IGNORES_SIGTERM), FileCgroup(tmp_path / "cgroup.procs"), releaser=r)
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: isinstance(w.status.state, Running) and ignores_sigterm(w.pid))
        t0 = time.monotonic()
        status = await w.stop(0)
        took = time.monotonic() - t0
        assert entered.wait(10), "the release was called"
        assert not go.is_set()
        assert took < 5, took  # the loop went on (reaped, status recorded) while the call blocked
        assert status.state.exit_code == 137  # type: ignore[union-attr]
    finally:
        go.set()
        await task
        assert [f.result(10) for f in r.futures] == [Outcome.RELEASED]
