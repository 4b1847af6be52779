"""The agent's log clock: it sees container logs grow and writes their times (logtimes.py).

One inotify fd watches every live container's log directory (IN_MODIFY and IN_CREATE: a run's
file may not exist yet when its directory is watched). An event on `<n>.log` takes the file's size
and the wall time at once, on the loop (one fstatat, no read); the marks are appended to the side
files by a thread every `flush_interval` (so a line's time is at most that late, plus the loop's
latency), the latest size per file winning. A shrunk live file means a rotation: the new `.1`'s
size moved the base. Watching a directory (again, after a restart) marks the size its runs have
then: what was written while nobody watched gets that time. A side file past `compact_at` bytes is
rewritten keeping only marks of bytes still on disk.

Costs nothing while logs are quiet; a chatty container costs one event per loop turn and one mark
per flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

from nodeagent.agent.runtime import logtimes
from nodeagent.agent.runtime.logs import file_identity
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.inotify import (
    IN_CREATE,
    IN_MODIFY,
    IN_Q_OVERFLOW,
    inotify_add_watch,
    inotify_init,
    inotify_rm_watch,
    parse_inotify,
)

log = structlog.get_logger(__name__)

_LIVE = re.compile(r"^\d+\.log$")
FLUSH_INTERVAL = 0.05
COMPACT_AT = 256 * 1024


@dataclass(slots=True)
class _File:
    times: logtimes.Times
    live_size: int
    rotated: tuple[int, int] | None  # (inode, size) of `.1` when last looked
    pending: list[str] = field(default_factory=list)
    compact_at: int = 0  # compact past this side-file size (twice what the last compaction left)


class LogClock:
    def __init__(self, clock: Clock | None = None, *, flush_interval: float = FLUSH_INTERVAL,
                 compact_at: int = COMPACT_AT) -> None:
        self.clock = clock or SystemClock()
        self.flush_interval, self.compact_at = flush_interval, compact_at
        self._fd: int | None = None
        self._dirs: dict[str, int] = {}  # directory -> wd
        self._by_wd: dict[int, str] = {}
        self._seen: dict[str, tuple[int, int]] = {}  # log path -> (size, ns) not flushed yet
        self._files: dict[str, _File] = {}  # only the flush thread touches these
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._fd = inotify_init()
        asyncio.get_running_loop().add_reader(self._fd, self._ready)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None

    def _now_ns(self) -> int:
        return int(self.clock.wall() * 1_000_000_000)

    # ---- what to watch ----
    def sync(self, directories: Iterable[str]) -> None:
        """Watch exactly these container log directories (the live containers'); one not there yet
        is tried again on the next sync."""
        if self._fd is None:
            return
        wanted = set(directories)
        for d in [d for d in self._dirs if d not in wanted]:
            wd = self._dirs.pop(d)
            self._by_wd.pop(wd, None)
            inotify_rm_watch(self._fd, wd)
        for d in wanted - set(self._dirs):
            try:
                wd = inotify_add_watch(self._fd, d, IN_MODIFY | IN_CREATE)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                    log.warning("log_clock_watch_failed", directory=d, error=str(e))
                continue
            self._dirs[d], self._by_wd[wd] = wd, d
            self._scan(d)

    def _scan(self, directory: str) -> None:
        try:
            names = os.listdir(directory)
        except OSError:
            return
        for name in names:
            if _LIVE.match(name):
                self._observe(os.path.join(directory, name))

    # ---- events ----
    def _observe(self, path: str) -> None:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return
        self._seen[path] = (size, self._now_ns())
        self._wake.set()

    def _ready(self) -> None:
        assert self._fd is not None
        try:
            buf = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        for wd, mask, name in parse_inotify(buf):
            if mask & IN_Q_OVERFLOW:
                for watched in self._dirs:
                    self._scan(watched)
                continue
            d = self._by_wd.get(wd)
            if d is not None and _LIVE.match(name):
                self._observe(os.path.join(d, name))

    # ---- writing ----
    async def run(self) -> None:
        """Flush the marks seen, every flush_interval while logs grow."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            seen, self._seen = self._seen, {}
            try:
                await asyncio.to_thread(self._flush, seen)
            except OSError as e:
                log.warning("log_clock_flush_failed", error=str(e))
            await asyncio.sleep(self.flush_interval)

    def _file(self, path: str) -> _File:
        f = self._files.get(path)
        if f is None:
            times = logtimes.load(path)
            last = times.ends[-1] if times.ends else times.base
            f = self._files[path] = _File(times, max(0, last - times.base), file_identity(path + ".1"))
        return f

    def _flush(self, seen: dict[str, tuple[int, int]]) -> None:
        """Blocking: append each file's new marks (and rotations) to its side file."""
        for path, (size, ns) in seen.items():
            f = self._file(path)
            if size < f.live_size:
                ident = file_identity(path + ".1")
                if ident is not None and ident != f.rotated:
                    f.times.base += ident[1]
                    f.rotated = ident
                    f.pending.append(logtimes.rotation(f.times.base))
            f.live_size = size
            if f.times.add(f.times.base + size, ns):
                f.pending.append(logtimes.mark(f.times.base + size, ns))
            self._write(path, f)
        live = {p for p in self._files if os.path.dirname(p) in self._dirs}
        for gone in set(self._files) - live:
            del self._files[gone]

    def _write(self, path: str, f: _File) -> None:
        if not f.pending:
            return
        side = logtimes.times_path(path)
        fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            os.write(fd, "".join(f.pending).encode())
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        f.pending.clear()
        if size > max(self.compact_at, f.compact_at):
            f.compact_at = 2 * self._compact(path, f)

    def _compact(self, path: str, f: _File) -> int:
        """Keep the marks of bytes still readable (the live file and its rotated copies); the new size."""
        start = logtimes.stream_start(path, f.times)
        keep = [i for i, end in enumerate(f.times.ends) if end > start]
        times = logtimes.Times([f.times.ends[i] for i in keep], [f.times.stamps[i] for i in keep], f.times.base)
        f.times = times
        text = logtimes.rotation(times.base) + "".join(logtimes.mark(e, s) for e, s in zip(times.ends, times.stamps,
                                                                                             strict=True))
        tmp = logtimes.times_path(path) + ".tmp"
        with open(tmp, "w", encoding="ascii") as out:
            out.write(text)
        os.replace(tmp, logtimes.times_path(path))
        return len(text)
