"""Where the log's blocking writes run, off the event loop: a thread of this process, or a child.

The store hands over one job at a time (a batch of rows to append, or a range to compact) and
awaits its future. Both committers run the same LogWriter; they differ in who pays for it:

- ThreadCommitter: one writer thread. A batch is one INSERT statement (see logdb.py), so the thread
  takes the GIL back a few times per batch, not once per row: the cost that made the old scheduler
  store move its writes to a child process (a thread per row) is gone.
- ProcessCommitter: a child process (writer_process.py) that reads length-prefixed pickled jobs
  on stdin and answers each on stdout. It holds the store's lock file (inherited), ignores
  SIGINT/SIGTERM, and exits when its stdin closes, after the jobs it has read; so a store reopened
  after its parent was SIGKILLed waits for it (logdb.lock).

bench/storage_bench.py measures both (throughput and what each costs the event loop); the SQLite
store uses the process by default, see sqlite.py for the figures behind that choice.
"""

from __future__ import annotations

import asyncio
import pickle
import sys
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from nodeagent.cluster.storage.interface import StoreError
from nodeagent.cluster.storage.logdb import LogWriter, Row, describe_failure
from nodeagent.cluster.storage.writer_process import FRAME


class WriteFailed(StoreError):
    """A job failed. `retryable`: the log is as it was before the job (disk full, I/O error) and
    later jobs may succeed; else the committer cannot write any more."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def _failure(e: BaseException) -> WriteFailed:
    return WriteFailed(*describe_failure(e))


class Committer(Protocol):
    def append(self, rows: Sequence[Row]) -> asyncio.Future[None]: ...

    def compact(self, lo: int, hi: int) -> asyncio.Future[int]: ...

    async def close(self) -> None: ...


class ThreadCommitter:
    def __init__(self, writer: LogWriter) -> None:
        self._writer = writer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-commit")

    @classmethod
    async def start(cls, path: str, lock_fd: int) -> ThreadCommitter:
        return cls(await asyncio.to_thread(LogWriter, path))

    def _run(self, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except Exception as e:  # every failure of a job is the job's result
            raise _failure(e) from e

    def append(self, rows: Sequence[Row]) -> asyncio.Future[None]:
        return asyncio.get_running_loop().run_in_executor(self._executor, self._run, self._writer.append, rows)

    def compact(self, lo: int, hi: int) -> asyncio.Future[int]:
        return asyncio.get_running_loop().run_in_executor(self._executor, self._run, self._writer.compact, lo, hi)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.close)
        self._executor.shutdown(wait=True)


class _ChildProtocol(asyncio.SubprocessProtocol):
    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.exited = asyncio.get_running_loop().create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        buf = self.buffer
        buf += data
        while len(buf) >= FRAME.size:
            (n,) = FRAME.unpack_from(buf)
            if len(buf) < FRAME.size + n:
                break
            ok, result = pickle.loads(bytes(buf[FRAME.size:FRAME.size + n]))
            del buf[:FRAME.size + n]
            fut = self.waiting.popleft()
            if fut.done():
                continue
            if ok:
                fut.set_result(result)
            else:
                fut.set_exception(WriteFailed(*result))

    def process_exited(self) -> None:
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(WriteFailed("the log writer process exited", retryable=False))
        if not self.exited.done():
            self.exited.set_result(None)


class ProcessCommitter:
    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _ChildProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self._stdin = stdin

    @classmethod
    async def start(cls, path: str, lock_fd: int) -> ProcessCommitter:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            _ChildProtocol, sys.executable, "-m", "nodeagent.cluster.storage.writer_process", path,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None, pass_fds=(lock_fd,))
        self = cls(transport, protocol)
        try:
            await self._send("ready")  # the child opened the log (or says why not)
        except BaseException:
            transport.close()  # kills the child if it still runs
            raise
        return self

    def _send(self, op: str, *args: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._protocol.exited.done():
            fut.set_exception(WriteFailed("the log writer process exited", retryable=False))
            return fut
        body = pickle.dumps((op, args), protocol=pickle.HIGHEST_PROTOCOL)
        self._protocol.waiting.append(fut)
        self._stdin.write(FRAME.pack(len(body)) + body)
        return fut

    def append(self, rows: Sequence[Row]) -> asyncio.Future[None]:
        return self._send("append", rows)

    def compact(self, lo: int, hi: int) -> asyncio.Future[int]:
        return self._send("compact", lo, hi)

    async def close(self) -> None:
        self._stdin.close()
        await self._protocol.exited
        self._transport.close()
