"""Per-line log times (runtime/logtimes.py) and the log clock that writes them (runtime/logclock.py):
lines take the time of the first mark at or past their end, rotations move the base, the side file
is compacted, and the clock sees a real file grow through inotify (with the injected wall clock)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from nodeagent.agent.runtime import logs, logtimes
from nodeagent.agent.runtime.logclock import LogClock
from nodeagent.core.clock import FakeClock

S = 1_000_000_000


def clock_of(times: logtimes.Times, start: int = 0, *, ts: bool = False, since: int | None = None,
             fallback: int = 99 * S) -> logtimes.LineClock:
    return logtimes.LineClock(times, start, timestamps=ts, since_ns=since, fallback=lambda: fallback)


def test_parse_skips_torn_lines_and_keeps_marks_ascending() -> None:
    t = logtimes.parse("4 10\nr 100\n3 11\n8 9\ngarbage\n12 1x\n16")  # 3 is no news; 8's time never goes back
    assert (t.ends, t.stamps, t.base) == ([4, 8], [10, 10], 100)


@pytest.mark.parametrize(("end", "ns"), [(0, 10), (4, 10), (5, 20), (8, 20), (9, None)])
def test_time_of_is_the_first_mark_at_or_past(end: int, ns: int | None) -> None:
    t = logtimes.parse("4 10\n8 20\n")
    assert t.time_of(end) == ns


def test_lines_get_times_and_since_filters() -> None:
    t = logtimes.parse(f"4 {1 * S}\n8 {2 * S}\n")
    assert clock_of(t, ts=True).feed(b"one\ntwo\nthree\n") == (
        b"1970-01-01T00:00:01.000000000Z one\n1970-01-01T00:00:02.000000000Z two\n"
        b"1970-01-01T00:01:39.000000000Z three\n")
    assert clock_of(t, since=2 * S).feed(b"one\ntwo\nthree\n") == b"two\nthree\n"
    assert clock_of(t, since=100 * S).feed(b"one\ntwo\n") == b""


def test_partial_lines_wait_for_their_newline_and_the_end() -> None:
    t = logtimes.parse(f"4 {1 * S}\n8 {2 * S}\n")
    c = clock_of(t, since=2 * S)
    assert c.feed(b"one\ntw") == b""
    assert c.feed(b"o\nthr") == b"two\n"
    assert c.feed(b"ee", final=True) == b"three"  # the open last line, without a newline as written
    c = clock_of(t, 4, ts=True)  # a tail: the bytes start at the run's byte 4
    assert c.feed(b"two\n", final=True) == b"1970-01-01T00:00:02.000000000Z two\n"


@pytest.mark.parametrize(("text", "ns"), [
    ("2023-11-14T22:13:20Z", 1_700_000_000 * S),
    ("2023-11-14T22:13:20.5Z", 1_700_000_000 * S + S // 2),
    ("2023-11-14T22:13:20.123456789Z", 1_700_000_000 * S + 123456789),
    ("2023-11-14T23:13:20+01:00", 1_700_000_000 * S),
])
def test_parse_time(text: str, ns: int) -> None:
    assert logtimes.parse_time_ns(text) == ns
    assert logtimes.format_ns(ns) == "2023-11-14T22:13:20." + f"{ns % S:09d}" + "Z"


@pytest.mark.parametrize("bad", ["yesterday", "2023-11-14", "2023-11-14T22:13:20", "2023-11-14T22:13:20.1234567890Z"])
def test_parse_time_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        logtimes.parse_time_ns(bad)


def test_stream_start_counts_the_rotated_copies(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"x" * 10)
    (tmp_path / "0.log.1").write_bytes(b"y" * 30)
    assert logtimes.stream_start(str(path), logtimes.Times(base=50)) == 20  # the first 20 bytes are gone


def test_prune_takes_the_side_files_too(tmp_path: Path) -> None:
    for name in ("0.log", "0.log.times", "0.log.1", "1.log", "1.log.times", "2.log", "2.log.times"):
        (tmp_path / name).write_text("x")
    logs.prune_runs(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == ["1.log", "1.log.times", "2.log", "2.log.times"]


async def _marked(log: Path, end: int) -> None:
    """Until the clock's side file holds the mark of byte `end` (it saw that write, at the wall time
    then): the wall may move on only after it. 10 s at most."""
    deadline = time.monotonic() + 10
    while not ((t := logtimes.load(str(log))).ends and t.ends[-1] == end):
        assert time.monotonic() < deadline, f"no mark at {end}; marks end with {t.ends[-3:]}"
        await asyncio.sleep(0.01)


async def test_the_clock_marks_growth_rotation_and_compacts(tmp_path: Path) -> None:
    wall = FakeClock()
    wall.wall = lambda: 1000.0  # type: ignore[method-assign]
    clock = LogClock(wall, flush_interval=0.0, compact_at=200)
    clock.start()
    runner = asyncio.create_task(clock.run())
    try:
        d = tmp_path / "main"
        clock.sync([str(d)])  # not there yet: tried again on the next sync
        d.mkdir()
        clock.sync([str(d)])
        log = d / "0.log"
        with open(log, "ab", buffering=0) as f:
            f.write(b"one\n")
            await _marked(log, 4)
            wall.wall = lambda: 1001.5  # type: ignore[method-assign]
            f.write(b"two\n")
            await _marked(log, 8)
            t = logtimes.load(str(log))
            assert (t.ends[-1], t.stamps[-1]) == (8, 1001_500_000_000) and t.time_of(4) == 1000 * S
            logs.rotate(str(log), max_size=1)  # copy-truncate on tmpfs, copy-collapse elsewhere: the head moves
            moved = os.path.getsize(str(log) + ".1")
            wall.wall = lambda: 1003.0  # type: ignore[method-assign]
            f.write(b"three\n")
            await _marked(log, 14)
        t = logtimes.load(str(log))
        assert t.base == moved and t.ends[-1] == 14 and t.time_of(14) == 1003 * S
        logs.rotate(str(log), max_size=1, max_files=2)  # the copy holding "one two" is dropped
        base = logtimes.stream_start(str(log), logtimes.Times(base=14))
        assert base >= 8
        for i in range(40):  # enough marks to pass compact_at: the ones of bytes gone are dropped
            wall.wall = lambda i=i: 1010.0 + i  # type: ignore[misc]
            with open(log, "ab") as f:
                f.write(b"more\n")
            await _marked(log, 14 + 5 * (i + 1))
        t = logtimes.load(str(log))
        assert t.base == 14 and t.ends[0] > base and t.ends[-1] == 14 + 5 * 40
        assert Path(str(log) + ".times").read_text().startswith("r 14\n")  # compacted: the base first
        clock.sync([])  # the container went: nothing watched
        assert clock._dirs == {}
    finally:
        runner.cancel()
        clock.close()
