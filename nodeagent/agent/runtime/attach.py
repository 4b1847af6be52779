"""`kubectl attach` to a container: its output is its log file (the process, or for a terminal
its holder, writes it), read from where it is when the session begins; its input, for a container
with `stdin: true`, is a FIFO beside its log that the process (or the OCI runtime's monitor, which
copies it to an image container) opened as its stdin when it started (spawn.py), so the agent
holds no descriptor of it between sessions and a restarted agent attaches the same way. A session
writes to the FIFO through a non-blocking descriptor watched on the loop: a process that does not
read slows the client down, never the agent.

With `tty: true` the input goes to the run's terminal instead, through a copy of its master taken
from the holder for the session (stdio_holder.py), and the client's window size is applied to it.
With `stdinOnce: true` (no tty) the first session's end of input releases the FIFO's keeper: the
container reads EOF, and later sessions get its output only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.agent.runtime.logs import LogSource

FIFO_NAME = "stdin"


class AttachUnavailable(Exception):
    """The container cannot be attached to now (not running, no stdin): a Failure to the client."""


@dataclass(frozen=True)
class AttachTarget:
    log: LogSource  # the current run's log, and whether the run still writes to it
    stdin: str | None  # its stdin FIFO, None when the container has no stdin
    container_dir: str = ""  # where the run's stdio holder is recorded (stdio_holder.py)
    tty: bool = False
    stdin_once: bool = False
    container_pids: Callable[[], list[int]] | None = None  # an image container's processes (its console)


def fifo_path(container_dir: str) -> str:
    return os.path.join(container_dir, FIFO_NAME)


def recreate_fifo(path: str) -> None:
    """A fresh FIFO for the next run (what an earlier run left unread is not handed on). Blocking."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    os.mkfifo(path, 0o600)


class StdinWriter:
    """A session's writer to a container's stdin FIFO."""

    def __init__(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in (errno.ENXIO, errno.ENOENT):  # nobody reads it: the process is gone
                raise AttachUnavailable("the container does not read its stdin any more") from None
            raise
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise AttachUnavailable(f"{path} is not the container's stdin pipe")
        self.fd: int | None = fd
        self.loop = asyncio.get_running_loop()

    async def write(self, data: bytes) -> None:
        """All of `data`, waiting while the pipe is full."""
        view = memoryview(data)
        while view and self.fd is not None:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                await self._writable()
                continue
            except BrokenPipeError:
                raise AttachUnavailable("the container closed its stdin") from None
            view = view[n:]

    async def _writable(self) -> None:
        assert self.fd is not None
        ready: asyncio.Future[None] = self.loop.create_future()
        fd = self.fd

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)
        self.loop.add_writer(fd, wake)
        try:
            await ready
        finally:
            self.loop.remove_writer(fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class TerminalWriter:
    """A session's writer to a run's terminal, through its own copy of the master. The master is
    not made non-blocking: O_NONBLOCK belongs to the open file, which the holder's `cat` shares,
    and cat would then read EAGAIN and end. So each write blocks on a short thread of its own with
    its own duplicate of the descriptor (never one closed and reused meanwhile): a process that
    does not read its terminal holds that thread and the session's input, never the loop."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.loop = asyncio.get_running_loop()

    async def write(self, data: bytes) -> None:
        if self.fd is None or not data:
            return
        done: asyncio.Future[None] = self.loop.create_future()
        fd = os.dup(self.fd)

        def settle(error: OSError | None) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(AttachUnavailable(f"the container's terminal is gone: {error.strerror}"))

        def run() -> None:
            error: OSError | None = None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as e:  # EIO: the terminal's last process is gone
                error = e
            finally:
                os.close(fd)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self.loop.call_soon_threadsafe(settle, error)

        threading.Thread(target=run, name="attach-tty-write", daemon=True).start()
        await done

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
