"""The per-run process that holds what a container's stdio needs across agent restarts (what
conmon or containerd's shim hold), for the two cases where the agent must not be that holder:

- `tty: true`: a pseudo-terminal. The container gets the terminal's slave as stdin, stdout and
  stderr (its controlling terminal); the master is held by a `cat` that copies everything the
  terminal says into the run's log (so `kubectl logs` and `kubectl attach` read it as they read
  any container's output) and exits when the last holder of the slave is gone (EIO). The agent
  keeps no descriptor of it: an attach session takes a copy of the master from the holder
  (pidfd_getfd, Linux 5.6) to write the client's keys and apply its window size (TIOCSWINSZ,
  which SIGWINCHes the terminal's foreground process group), and closes it when the session
  ends, so a restarted agent attaches to the same terminal the same way and the container never
  sees a hangup. For an image container the slave is the OCI runtime monitor's own terminal
  (runc run in the foreground relays it to the container's console and forwards SIGWINCH);
  crun hands the container's console itself to the agent, and its master is what the `cat`
  holds (oci/console.py).
- `stdinOnce: true` (without tty): the container reads its stdin FIFO opened read-only, and a
  `sleep infinity` holding the FIFO open for writing keeps it from reading EOF until the first
  attach session's input ends; then the agent kills the keeper and the container reads what
  was sent, then EOF (containerd's rule: `StdinOnce && !Tty` closes the container's stdin when
  the attach stream's stdin ends; with a terminal, stdin stays open).

A holder is recorded as `<container dir>/holder` ("kind pid start_time"), written whole
(temporary file, rename) before the container starts; its start time tells a holder from a
process that reused its PID. A holder's own memory is not charged to the container's cgroup
(a `cat` or a `sleep`: some hundred KiB each).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import secrets
import shutil
import signal
from dataclasses import dataclass

import structlog

from nodeagent.agent.node.procfs import process_start_time
from nodeagent.agent.runtime.spawn import LOG_MODE

log = structlog.get_logger(__name__)

RECORD_NAME = "holder"
TTY, STDIN = "tty", "stdin"  # the kinds
_PATH = "/usr/bin:/bin"
CAT = shutil.which("cat", path=_PATH) or "/bin/cat"
SLEEP = shutil.which("sleep", path=_PATH) or "/bin/sleep"
_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the unified syscall table)
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


class HolderGone(Exception):
    """The holder is not there (never started, killed, or its run is over)."""


@dataclass(frozen=True)
class Holder:
    kind: str
    pid: int
    start_time: int


def record_path(container_dir: str) -> str:
    return os.path.join(container_dir, RECORD_NAME)


def _identified(kind: str, pid: int) -> Holder:
    """The holder as recorded; the agent reaps it when it ends (its child until the agent restarts)."""
    _reap_on_exit(pid)
    start = process_start_time(pid)
    if start is None:
        raise ChildProcessError(f"holder pid {pid} vanished before it could be identified")
    return Holder(kind, pid, start)


def start_tty(container_dir: str, log_path: str) -> tuple[Holder, int]:
    """A new terminal whose master a `cat` holds, copying into `log_path`: (the holder, the
    slave's descriptor). The caller starts the container on os.ttyname(slave), then closes the
    slave; until then the holder cannot read EIO. Blocking (a spawn and a small write)."""
    master, slave = os.openpty()
    try:
        holder = hold_terminal(container_dir, log_path, master)
    except BaseException:
        os.close(slave)
        raise
    finally:
        os.close(master)
    return holder, slave


def hold_terminal(container_dir: str, log_path: str, master: int) -> Holder:
    """A `cat` that holds the terminal `master` (the caller closes its own copy) and copies what
    it says into `log_path`, recorded as the run's TTY holder. Blocking (a spawn, a small write)."""
    pid = os.posix_spawn(CAT, [CAT], {"PATH": _PATH}, setsid=True, setsigdef=_SIGDEF, setsigmask=(),
                         file_actions=[(os.POSIX_SPAWN_DUP2, master, 0),
                                       (os.POSIX_SPAWN_OPEN, 1, log_path,
                                        os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_MODE),
                                       (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)])
    holder = _identified(TTY, pid)
    try:
        write_record(container_dir, holder)
    except BaseException:
        _kill(holder)
        raise
    return holder


def start_stdin_keeper(container_dir: str, fifo: str) -> Holder:
    """A `sleep infinity` that holds `fifo` open (read-write: the open never waits), so the
    container, which opens it read-only, reads no EOF before release(). Blocking."""
    pid = os.posix_spawn(SLEEP, [SLEEP, "infinity"], {"PATH": _PATH}, setsid=True, setsigdef=_SIGDEF, setsigmask=(),
                         file_actions=[(os.POSIX_SPAWN_OPEN, 0, fifo, os.O_RDWR, 0),
                                       (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                                       (os.POSIX_SPAWN_DUP2, 1, 2)])
    holder = _identified(STDIN, pid)
    try:
        write_record(container_dir, holder)
    except BaseException:
        _kill(holder)
        raise
    return holder


def _reap_on_exit(pid: int) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop: the caller reaps it
        return
    pidfd = os.pidfd_open(pid)

    def reap() -> None:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                return
        loop.remove_reader(pidfd)
        os.close(pidfd)
    loop.add_reader(pidfd, reap)


def write_record(container_dir: str, holder: Holder) -> None:
    path = record_path(container_dir)
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), "w") as f:
            f.write(f"{holder.kind} {holder.pid} {holder.start_time}\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_record(container_dir: str) -> Holder | None:
    """The recorded holder; None when there is none (or the record is unreadable)."""
    try:
        with open(record_path(container_dir), encoding="ascii") as f:
            kind, pid, start = f.read().split()
        return Holder(kind, int(pid), int(start))
    except (OSError, ValueError):
        return None


def _pidfd(holder: Holder) -> int:
    """A pidfd of the holder, opened before its start time is checked (PIDs get reused)."""
    try:
        fd = os.pidfd_open(holder.pid)
    except ProcessLookupError:
        raise HolderGone(f"holder {holder.pid} is gone") from None
    if process_start_time(holder.pid) != holder.start_time:
        os.close(fd)
        raise HolderGone(f"holder {holder.pid} is gone")
    return fd


def _kill(holder: Holder) -> bool:
    try:
        fd = _pidfd(holder)
    except HolderGone:
        return False
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)
    return True


def alive(container_dir: str, kind: str) -> bool:
    """A live holder of that kind is recorded (a terminal's: it may still be copying what the
    run's last process wrote before it ended)."""
    holder = read_record(container_dir)
    return holder is not None and holder.kind == kind and process_start_time(holder.pid) == holder.start_time


def take_fd(container_dir: str, kind: str, target_fd: int = 0) -> int:
    """A copy (close-on-exec) of the holder's descriptor `target_fd`: the terminal's master for
    TTY. HolderGone when no live holder of that kind is recorded."""
    holder = read_record(container_dir)
    if holder is None or holder.kind != kind:
        raise HolderGone(f"no {kind} holder")
    pidfd = _pidfd(holder)
    try:
        return pidfd_getfd(pidfd, target_fd)
    finally:
        os.close(pidfd)


def release(container_dir: str, kind: str) -> bool:
    """Kill the recorded holder of that kind and forget it (a keeper: the container's stdin then
    ends); True when there was a live one. Idempotent."""
    holder = read_record(container_dir)
    if holder is None or holder.kind != kind:
        return False
    killed = _kill(holder)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(container_dir))
    if killed:
        log.info("stdio_holder_released", kind=kind, pid=holder.pid)
    return killed


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def pidfd_getfd(pidfd: int, target_fd: int) -> int:
    """pidfd_getfd(2) (Python has no wrapper): needs ptrace access to the holder (root, or the
    holder's own user where Yama allows it). OSError when refused or the descriptor is not open."""
    fd = _libc().syscall(_SYS_PIDFD_GETFD, pidfd, target_fd, 0)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)
