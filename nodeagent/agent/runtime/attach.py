"""`kubectl attach` to a host-process container: its output is its log file (the process writes it
itself), read from where it is when the session begins; its input, for a container with
`stdin: true`, is a FIFO beside its log that the process opened read-write as its stdin when it
started (spawn.py), so the agent holds no descriptor of it between sessions and a restarted agent
attaches the same way. A session writes to the FIFO through a non-blocking descriptor watched on
the loop: a process that does not read slows the client down, never the agent.

Not done: a terminal (`tty: true` is accepted, none is allocated: kubectl then attaches without
one), `stdinOnce` (stdin stays open after a session; a process never reads EOF on it), image (OCI)
containers' stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
from dataclasses import dataclass

from nodeagent.agent.runtime.logs import LogSource

FIFO_NAME = "stdin"


class AttachUnavailable(Exception):
    """The container cannot be attached to now (not running, no stdin): a Failure to the client."""


@dataclass(frozen=True)
class AttachTarget:
    log: LogSource  # the current run's log, and whether the run still writes to it
    stdin: str | None  # its stdin FIFO, None when the container has no stdin


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
