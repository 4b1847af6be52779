"""Per-line times of container logs, kept beside the log instead of inside it.

The container writes its log file itself (spawn.py: its own O_APPEND descriptor, no pipe through
the agent), so the bytes stay exactly what it printed and `kubectl logs` without timestamps reads
them as before, old files included. The times live in a side file, `<run>.log.times`, appended by
the agent's LogClock (logclock.py) as it sees the log grow:

    <end> <unix_ns>     by this wall time the run had written `end` bytes
    r <base>            the live file's first byte is the run's byte `base` (after a rotation)

Offsets count from the run's first byte across rotations (rotation moves the live file's head to
`.1`; `base` says how much moved). A line's time is that of the first mark at or past its end:
the moment the agent saw it written (within the clock's flush interval), never before. Bytes the
agent could not see being written (it was down; a file without a times file, written before this
existed) take the next mark's time, else the file's mtime: an upper bound, as for the rest.

The kubelet's CRI files carry `RFC3339Nano stream tag` before each line instead; that costs a
pipe and a writer process per container and changes the files, for a precision the API never shows
beyond what `--since`/`--timestamps` need.
"""

from __future__ import annotations

import bisect
import datetime
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from nodeagent.agent.runtime.logs import rotated_files

SUFFIX = ".times"


def times_path(log_path: str) -> str:
    return log_path + SUFFIX


@dataclass(slots=True)
class Times:
    """A run's marks (ends ascending, with their times) and the live file's base."""

    ends: list[int] = field(default_factory=list)
    stamps: list[int] = field(default_factory=list)
    base: int = 0

    def add(self, end: int, ns: int) -> bool:
        """A mark past the last one (an end that did not grow is no news); True if kept."""
        if self.ends and end <= self.ends[-1]:
            return False
        self.ends.append(end)
        self.stamps.append(max(ns, self.stamps[-1]) if self.stamps else ns)
        return True

    def time_of(self, end: int) -> int | None:
        """The time (ns) of the first mark at or past byte `end`; None when none is."""
        i = bisect.bisect_left(self.ends, end)
        return self.stamps[i] if i < len(self.stamps) else None


def parse(text: str) -> Times:
    """The side file's records; a torn or foreign line is skipped (a crash mid-append)."""
    t = Times()
    for line in text.splitlines():
        parts = line.split()
        try:
            if len(parts) == 2 and parts[0] == "r":
                t.base = int(parts[1])
            elif len(parts) == 2:
                t.add(int(parts[0]), int(parts[1]))
        except ValueError:
            continue
    return t


def load(log_path: str) -> Times:
    """The run's times (empty when it has no side file). Blocking."""
    try:
        with open(times_path(log_path), encoding="ascii", errors="replace") as f:
            return parse(f.read())
    except FileNotFoundError:
        return Times()


def mark(end: int, ns: int) -> str:
    return f"{end} {ns}\n"


def rotation(base: int) -> str:
    return f"r {base}\n"


def format_ns(ns: int) -> str:
    """The kubelet's timestamp prefix format: RFC 3339 with nine fractional digits, UTC."""
    sec, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{frac:09d}Z"


_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


def parse_time_ns(text: str) -> int:
    """An RFC 3339 time (`--since-time`; up to nine fractional digits) in ns; ValueError if not one."""
    m = _TIME.match(text.strip())
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    seconds = datetime.datetime.fromisoformat(m.group(1) + zone).timestamp()
    return int(seconds) * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))


def mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return time.time_ns()


def stream_start(log_path: str, times: Times) -> int:
    """The run's offset of the first byte a whole read returns: the base less the rotated copies
    still there (they are read first)."""
    kept = 0
    for p in rotated_files(log_path):
        try:
            kept += os.stat(p).st_size
        except FileNotFoundError:
            continue
    return max(0, times.base - kept)


class LineClock:
    """Turns a run's bytes, read forward from offset `start`, into whole lines with their times,
    keeping those at or after `since_ns` and prefixing the time when `timestamps`; what it returns
    is what the log API writes. A line's end not marked yet takes `fallback()` (now for a running
    container, the file's mtime otherwise)."""

    def __init__(self, times: Times, start: int, *, timestamps: bool, since_ns: int | None,
                 fallback: Callable[[], int]) -> None:
        self.times, self.offset = times, start
        self.timestamps, self.since_ns, self.fallback = timestamps, since_ns, fallback
        self._partial = b""

    def _lines(self, data: bytes, final: bool) -> Iterator[bytes]:
        buf = self._partial + data
        lines = buf.split(b"\n")
        self._partial = b"" if final else lines.pop()
        if final and lines and lines[-1] == b"":
            lines.pop()
            ends_open = False
        else:
            ends_open = final
        for i, line in enumerate(lines):
            last_open = ends_open and i == len(lines) - 1
            self.offset += len(line) + (0 if last_open else 1)
            yield line if last_open else line + b"\n"

    def feed(self, data: bytes, *, final: bool = False) -> bytes:
        """The output for `data` (a partial last line is held until its newline or `final`)."""
        out = []
        for line in self._lines(data, final):
            ns = self.times.time_of(self.offset)
            if ns is None:
                ns = self.fallback()
            if self.since_ns is not None and ns < self.since_ns:
                continue
            out.append((format_ns(ns).encode() + b" " + line) if self.timestamps else line)
        return b"".join(out)
