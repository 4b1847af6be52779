"""An interactive command in a container (`kubectl exec`): the process and its streams, on the loop.

The command starts through the container spawn shim (spawn.spawn_stdio): it joins the container's
cgroups and takes its oom_score_adj before it execs, with the container's env, working directory
and identity, as an exec probe does. Its streams are pipes, or one pseudo-terminal (`tty`) which it
gets as its controlling terminal; the agent holds the other ends, non-blocking, watched with
add_reader/add_writer: no thread, nothing blocks.

Output comes out of `read()` as (channel, bytes) with channel 1 (stdout) or 2 (stderr), None at
the end: once every output has reached EOF, or at most `drain_s` after the process exited (a
background child may keep a pipe open). At most `MAX_QUEUED` chunks wait; beyond that the
descriptors are not read until the consumer catches up (a slow client slows the command down
instead of filling the agent's memory). `kill()` ends the whole process group (the session the
shim started): the caller does so when the client goes before the command ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable, Sequence

import structlog

from nodeagent.agent.runtime.spawn import LaunchSpec, spawn_stdio
from nodeagent.agent.runtime.state import reap_exit_code

log = structlog.get_logger(__name__)

CHUNK = 64 * 1024
MAX_QUEUED = 32
STDOUT, STDERR = 1, 2
KILL_RETRY_S = 0.05  # how often a kill asks again for the process a runtime exec'd (its pid file)
KILL_TRIES = 100  # then (5 s) the runtime is killed anyway


class ExecUnavailable(Exception):
    """The container cannot take a command now (not running, or from an image): a 400 to the client."""


class ExecSession:
    def __init__(self, pid: int, pidfd: int, stdin_fd: int | None, outputs: dict[int, int], tty_fd: int | None,
                 drain_s: float) -> None:
        self.pid, self.pidfd = pid, pidfd
        self.stdin_fd = stdin_fd  # the pipe's write end or the terminal's master (tty_fd)
        self.tty_fd = tty_fd
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.outputs = dict(outputs)  # fd -> channel, while open
        self.paused = False
        self.drain_s = drain_s
        self.exit_code: asyncio.Future[int] = self.loop.create_future()
        self._ended = False
        # what else kill() ends (a runtime's exec'd process); False while that is not known yet
        self.on_kill: Callable[[], bool] | None = None
        self.kill_tries = 0
        for fd in self.outputs:
            self.loop.add_reader(fd, self._read, fd)
        self.loop.add_reader(pidfd, self._reap)
        if not self.outputs:
            self._end_output()

    @classmethod
    def start(cls, spec: LaunchSpec, procs_files: Sequence[str], oom_score_adj: int | None, *, stdin: bool,
              stdout: bool, stderr: bool, tty: bool, drain_s: float = 0.5) -> ExecSession:
        """Spawn the command (on the loop: posix_spawn does not copy the agent); OSError or
        ValueError when it cannot start."""
        mine: list[int] = []  # our ends, closed if the start fails
        theirs: list[int] = []  # the child's ends, closed once it has them
        try:
            if tty:
                master, slave = os.openpty()
                mine.append(master)
                theirs.append(slave)
                os.set_blocking(master, False)
                spawned = spawn_stdio(spec, procs_files, oom_score_adj, tty=os.ttyname(slave))
                outputs = {master: STDOUT} if stdout else {}
                stdin_fd: int | None = master
                tty_fd: int | None = master
            else:
                ends: dict[str, int | None] = {}
                stdin_fd, outputs, tty_fd = None, {}, None
                for name, wanted in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
                    if not wanted:
                        ends[name] = None
                        continue
                    r, w = os.pipe2(os.O_CLOEXEC)
                    ours, child = (w, r) if name == "stdin" else (r, w)
                    mine.append(ours)
                    theirs.append(child)
                    os.set_blocking(ours, False)
                    ends[name] = child
                    if name == "stdin":
                        stdin_fd = ours
                    else:
                        outputs[ours] = STDOUT if name == "stdout" else STDERR
                spawned = spawn_stdio(spec, procs_files, oom_score_adj, stdin=ends["stdin"], stdout=ends["stdout"],
                                      stderr=ends["stderr"])
            pidfd = os.pidfd_open(spawned.pid)
        except BaseException:
            for fd in mine:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return cls(spawned.pid, pidfd, stdin_fd if stdin or tty else None, outputs, tty_fd, drain_s)

    # ---- output ----
    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: the terminal's last holder closed it
            data = b""
        if not data:
            self._close_output(fd)
            return
        self.queue.put_nowait((self.outputs[fd], data))
        if self.queue.qsize() >= MAX_QUEUED and not self.paused:
            self.paused = True
            for out in self.outputs:
                self.loop.remove_reader(out)

    def _close_output(self, fd: int) -> None:
        self.outputs.pop(fd, None)
        self.loop.remove_reader(fd)
        if fd != self.tty_fd:
            os.close(fd)
        if not self.outputs:
            self._end_output()

    def _end_output(self) -> None:
        if not self._ended:
            self._ended = True
            self.queue.put_nowait(None)

    def _drain_and_end(self) -> None:
        """The process is gone and `drain_s` has passed: what is readable now, then the end."""
        for fd in list(self.outputs):
            with contextlib.suppress(OSError):
                while chunk := os.read(fd, CHUNK):
                    self.queue.put_nowait((self.outputs[fd], chunk))
            self._close_output(fd)
        self._end_output()

    async def read(self) -> tuple[int, bytes] | None:
        item = await self.queue.get()
        if self.paused and self.queue.qsize() < MAX_QUEUED // 4:
            self.paused = False
            for fd in self.outputs:
                self.loop.add_reader(fd, self._read, fd)
        return item

    # ---- input ----
    async def write_stdin(self, data: bytes) -> None:
        """Write all of it (waiting while the pipe is full); dropped once the command is gone."""
        fd = self.stdin_fd
        while data and fd is not None and fd == self.stdin_fd:
            try:
                n = os.write(fd, data)
            except BlockingIOError:
                writable: asyncio.Future[None] = self.loop.create_future()
                self.loop.add_writer(fd, _set_done, writable)
                try:
                    await writable
                finally:
                    self.loop.remove_writer(fd)
                continue
            except OSError:  # EPIPE / EIO: nobody reads any more
                return
            data = data[n:]

    def close_stdin(self) -> None:
        """End of input: the pipe is closed; a terminal gets ^D (its master must stay open)."""
        if self.stdin_fd is None:
            return
        if self.stdin_fd == self.tty_fd:
            with contextlib.suppress(OSError):
                os.write(self.stdin_fd, b"\x04")
        else:
            os.close(self.stdin_fd)
        self.stdin_fd = None

    def resize(self, columns: int, rows: int) -> None:
        if self.tty_fd is not None:
            set_window_size(self.tty_fd, columns, rows)

    # ---- the process ----
    def _reap(self) -> None:
        code = reap_exit_code(self.pid)
        if code is None:
            return
        self.loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        if not self.exit_code.done():
            self.exit_code.set_result(code)
        self.loop.call_later(self.drain_s, self._drain_and_end)

    def kill(self) -> None:
        if self.pidfd < 0:
            return
        if self.on_kill is not None and not self.on_kill() and self.kill_tries < KILL_TRIES:
            # the runtime runs the command but has not named its process yet: killing the runtime
            # now would leave the command running in the container, so it is asked again shortly
            self.kill_tries += 1
            self.loop.call_later(KILL_RETRY_S, self.kill)
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.killpg(self.pid, signal.SIGKILL)

    def close(self) -> None:
        """Release every descriptor (after the end, or after kill() and the exit)."""
        for fd in list(self.outputs):
            self._close_output(fd)
        if self.stdin_fd is not None and self.stdin_fd != self.tty_fd:
            os.close(self.stdin_fd)
        self.stdin_fd = None
        if self.tty_fd is not None:
            os.close(self.tty_fd)
            self.tty_fd = None


def set_window_size(fd: int, columns: int, rows: int) -> None:
    """A terminal's size, set through its master: the kernel SIGWINCHes its foreground process
    group (`kubectl exec -it` and `attach -it` send the client's size, then every change)."""
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
