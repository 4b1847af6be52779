"""Kernel files kept open and re-read with pread(2): the sampler's way to read cgroupfs cheaply.

Opening a cgroupfs file is most of what reading it costs: open+read+close takes up to several
times as long as a pread at offset 0 on a descriptor kept open, which regenerates the file's
content just the same (bench/stats_bench.py prints a whole pass both ways; the figures:
bench/README.md, "cgroupfs files kept open"). So each file the sampler reads is opened once and
kept, up to a budget of descriptors (the agent's RLIMIT_NOFILE is shared with its API sockets and
pidfds); beyond the budget a file is opened, read and closed each time.

A kept descriptor does not hold its cgroup up: rmdir succeeds, and the next read fails with
ENODEV, which drops the descriptor. Files not read in a pass are closed by `sweep()`.
Hand-written because it is a dozen lines around os.pread; no library does this.
"""

from __future__ import annotations

import os
import resource

READ_SIZE = 64 * 1024  # larger than any cgroup stat file (v2 memory.stat is ~1.5 KiB)


def default_budget() -> int:
    """Half the soft RLIMIT_NOFILE: the other half stays for sockets, pidfds and logs."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(0, soft // 2)


class KeptFiles:
    """path -> open descriptor, at most `budget` of them; one instance per sampler (not thread-safe)."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = default_budget() if budget is None else budget
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")
        self._fds: dict[str, int] = {}
        self._seen: set[str] = set()
        self.opens = 0  # open() calls so far (kept or not), for tests and the bench

    def read(self, path: str) -> bytes:
        """The file's whole content, read now; OSError (FileNotFoundError, ENODEV...) if it is gone."""
        self._seen.add(path)
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return _pread_all(fd)
            except OSError:
                del self._fds[path]
                os.close(fd)
                raise
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.opens += 1
        if len(self._fds) < self.budget:
            self._fds[path] = fd
            try:
                return _pread_all(fd)
            except OSError:
                del self._fds[path]
                os.close(fd)
                raise
        try:
            return _pread_all(fd)
        finally:
            os.close(fd)

    def sweep(self) -> int:
        """Close the descriptors of files not read since the last sweep; how many were closed."""
        stale = [p for p in self._fds if p not in self._seen]
        for p in stale:
            os.close(self._fds.pop(p))
        self._seen = set()
        return len(stale)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._seen = set()

    def __len__(self) -> int:
        return len(self._fds)


def _pread_all(fd: int) -> bytes:
    data = os.pread(fd, READ_SIZE, 0)
    if len(data) < READ_SIZE:
        return data
    chunks = [data]
    offset = len(data)
    while True:
        more = os.pread(fd, READ_SIZE, offset)
        if not more:
            return b"".join(chunks)
        chunks.append(more)
        offset += len(more)


__all__ = ["KeptFiles", "default_budget"]
