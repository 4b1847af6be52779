"""The store's writer as a child process: SQLite commits without holding the scheduler's GIL.

Why a process and not a thread: every SQLite commit costs CPU (the WAL write and its bookkeeping)
and a writer thread takes the GIL back around each one; the scheduling loop's numpy calls release
the GIL for every vector operation, so each of them could wait for the writer. This process gets
the store's writes onto the other core, and the service schedules as fast as with no store at all.
The measurements: see bench/README.md ("The scheduler's store: a writer process").

Protocol (stdin/stdout pipes): the parent sends one frame per turn of its event loop, holding
every transaction queued in that turn; the child applies them in order, each its own transaction
(SchedulerSqliteStore.apply_many), and answers one JSON line per frame, {"<index>": "<error>"} for the
transactions that failed ({} when all committed). The child holds an flock on `<db>.writer.lock`
while it runs: a scheduler restarted after a SIGKILL waits for its predecessor's writer to finish
the frames it already had before it reads the database. The child ignores SIGINT/SIGTERM and exits
when its stdin closes (the parent exits, however it dies), after the frames it has read.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import struct
import sys
from collections import deque
from collections.abc import Callable, Sequence

import structlog

from nodeagent.cluster.store.sqlite import (
    Change,
    Delete,
    Revisions,
    SchedulerPut,
    SchedulerSnapshot,
    SchedulerSqliteStore,
)

log = structlog.get_logger(__name__)

_TX = struct.Struct("<I")
_CHANGE = struct.Struct("<cQHII")  # op, revision, len(kind), len(key), len(data)
LOCK_TIMEOUT = 30.0


def encode_frame(batch: Sequence[Sequence[Change]]) -> bytes:
    parts = [_TX.pack(len(batch))]
    for changes in batch:
        parts.append(_TX.pack(len(changes)))
        for c in changes:
            kind, key = c.kind.encode(), c.key.encode()
            put = isinstance(c, SchedulerPut)
            data = c.data.encode() if isinstance(c, SchedulerPut) else b""
            parts += [_CHANGE.pack(b"P" if put else b"D", c.revision, len(kind), len(key), len(data)), kind, key, data]
    body = b"".join(parts)
    return _TX.pack(len(body)) + body


def decode_frame(body: bytes) -> list[list[Change]]:
    (count,), pos = _TX.unpack_from(body, 0), _TX.size
    batch: list[list[Change]] = []
    for _ in range(count):
        (n,), pos = _TX.unpack_from(body, pos), pos + _TX.size
        changes: list[Change] = []
        for _ in range(n):
            op, rev, lk, lkey, ld = _CHANGE.unpack_from(body, pos)
            pos += _CHANGE.size
            kind = body[pos:pos + lk].decode()
            key = body[pos + lk:pos + lk + lkey].decode()
            data = body[pos + lk + lkey:pos + lk + lkey + ld].decode()
            pos += lk + lkey + ld
            changes.append(SchedulerPut(kind, key, data, rev) if op == b"P" else Delete(kind, key, rev))
        batch.append(changes)
    return batch


def lock_path(db: str) -> str:
    return db + ".writer.lock"


def _lock(db: str, blocking: bool) -> int:
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    return fd


def child_main(db: str, sync: str) -> int:
    """The writer process: frames in on stdin, one JSON line per frame out on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lock = _lock(db, blocking=True)
    store = SchedulerSqliteStore(db, sync)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            head = inp.read(_TX.size)
            if len(head) < _TX.size:
                return 0
            (size,) = _TX.unpack(head)
            body = inp.read(size)
            if len(body) < size:
                return 0
            errors = store.apply_many(decode_frame(body))
            out.write(json.dumps({str(i): repr(e) for i, e in enumerate(errors) if e is not None}).encode() + b"\n")
            out.flush()
    finally:
        store.close()
        os.close(lock)


class ProcessStore(Revisions):
    """AsyncStore's interface with the SQLite writes in a child process (see the module doc)."""

    def __init__(self, path: str, sync: str = "normal", on_failure: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.path, self.sync, self.on_failure = path, sync, on_failure
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: deque[list[asyncio.Future[None]]] = deque()
        self._closing = False

    @classmethod
    def open(cls, path: str, sync: str = "normal", on_failure: Callable[[str], None] | None = None) -> ProcessStore:
        """Create the database file and check its settings now (OSError when unusable), then wire."""
        SchedulerSqliteStore(path, sync).close()
        return cls(path, sync, on_failure)

    def load(self) -> SchedulerSnapshot:
        """Wait for a previous writer of this file to finish, then read everything."""
        fd = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = LOCK_TIMEOUT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline <= 0:
                        raise OSError(f"{self.path}: another scheduler's store writer holds "
                                      f"{lock_path(self.path)}") from None
                    import time
                    time.sleep(0.05)
                    deadline -= 0.05
            store = SchedulerSqliteStore(self.path, self.sync)
            try:
                snapshot, self.revision = store.load()
            finally:
                store.close()
        finally:
            os.close(fd)  # releases the lock: the child takes it next
        return snapshot

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodeagent.cluster.store.writer", self.path, self.sync,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        self._reader = asyncio.get_running_loop().create_task(self._read_replies(), name="store-writer")

    def _handoff(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._queue = self._queue, []
        self.handoffs += 1
        futures = [fut for _, fut in batch]
        if self._proc is None or self._proc.stdin is None or self._proc.returncode is not None:
            for fut in futures:
                if not fut.done():
                    fut.set_exception(OSError("the store writer is not running"))
            return
        self._waiting.append(futures)
        self._proc.stdin.write(encode_frame([changes for changes, _ in batch]))

    async def _read_replies(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            line = await self._proc.stdout.readline()
            if not line:
                break
            errors = json.loads(line)
            futures = self._waiting.popleft()
            for i, fut in enumerate(futures):
                if fut.done():
                    continue
                if str(i) in errors:
                    fut.set_exception(OSError(f"store write failed: {errors[str(i)]}"))
                else:
                    fut.set_result(None)
        code = await self._proc.wait()
        while self._waiting:
            for fut in self._waiting.popleft():
                if not fut.done():
                    fut.set_exception(OSError(f"the store writer exited ({code})"))
        if not self._closing:
            log.error("store_writer_died", code=code)
            if self.on_failure is not None:
                self.on_failure(f"the store writer exited with status {code}")

    async def aclose(self) -> None:
        await self.flush()
        self._closing = True
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
            await self._proc.wait()
        if self._reader is not None:
            await self._reader


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1], sys.argv[2]))
