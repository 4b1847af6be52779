"""The server's short in-memory window of the agents' samples: one ring buffer per series.

A series is one container, pod or node (the key is the caller's: a tuple such as
("ns", "pod", "container") works). Each sample holds the time it was read, the cumulative CPU
counter (nanoseconds), the memory working set (bytes) and whether a restart separates it from the
previous one. The rules for a usable pair of samples are those of metrics.rate.

Why numpy and not a deque per series: 10,000 pods with their containers are tens of thousands of
series, sampled every second. One 2-D array per field (series x capacity) keeps that in a few
contiguous blocks (25 bytes a sample, no Python object per sample), a write is an index
assignment, and `usage_all` computes every series' rate over a window in a handful of vectorised
operations instead of a Python loop per sample (bench/metrics_bench.py measures both).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nodeagent.cluster.autoscaling.metrics.rate import DEFAULT_MAX_GAP, NANOS_PER_SECOND

DEFAULT_CAPACITY = 32  # samples a series keeps: 31 s of 1 s samples


@dataclass(frozen=True, slots=True)
class WindowUsage:
    """What a series used over a window ending at `timestamp`."""

    cpu_cores: float | None  # None: fewer than two usable samples in the window
    memory_bytes: int  # the working set of the latest sample
    timestamp: float  # the latest sample's time
    window: float  # seconds the CPU rate covers (0.0 without a rate)


class SampleWindow:
    """Ring buffers of (time, cumulative CPU ns, working set bytes) per series."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_gap: float = DEFAULT_MAX_GAP,
                 initial_series: int = 256) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2 samples, got {capacity}")
        if max_gap <= 0:
            raise ValueError(f"max_gap must be positive, got {max_gap}")
        self.capacity = capacity
        self.max_gap = max_gap
        self._slots: dict[Hashable, int] = {}
        self._free: list[int] = list(range(max(1, initial_series) - 1, -1, -1))
        self._start: dict[int, float] = {}  # slot -> the start time of its latest sample, if known
        rows = max(1, initial_series)
        self._t: npt.NDArray[np.float64] = np.full((rows, capacity), np.nan)
        self._cpu: npt.NDArray[np.int64] = np.zeros((rows, capacity), np.int64)
        self._mem: npt.NDArray[np.int64] = np.zeros((rows, capacity), np.int64)
        self._brk: npt.NDArray[np.bool_] = np.zeros((rows, capacity), np.bool_)
        self._head: npt.NDArray[np.int64] = np.zeros(rows, np.int64)  # next write position
        self._count: npt.NDArray[np.int64] = np.zeros(rows, np.int64)
        self._used: npt.NDArray[np.bool_] = np.zeros(rows, np.bool_)

    # --- bookkeeping ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._slots))

    @property
    def nbytes(self) -> int:
        """Bytes held by the sample arrays (the dict of keys comes on top)."""
        return sum(a.nbytes for a in (self._t, self._cpu, self._mem, self._brk, self._head, self._count, self._used))

    def _grow(self) -> None:
        rows = self._t.shape[0]
        extra = rows  # double

        def more(a: npt.NDArray[np.generic], fill: object) -> npt.NDArray[np.generic]:
            pad = np.full((extra, *a.shape[1:]), fill, dtype=a.dtype)
            return np.concatenate([a, pad])

        self._t = more(self._t, np.nan)  # type: ignore[assignment]
        self._cpu = more(self._cpu, 0)  # type: ignore[assignment]
        self._mem = more(self._mem, 0)  # type: ignore[assignment]
        self._brk = more(self._brk, False)  # type: ignore[assignment]
        self._head = more(self._head, 0)  # type: ignore[assignment]
        self._count = more(self._count, 0)  # type: ignore[assignment]
        self._used = more(self._used, False)  # type: ignore[assignment]
        self._free.extend(range(rows + extra - 1, rows - 1, -1))

    def _slot(self, key: Hashable) -> int:
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slots[key] = slot
        self._used[slot] = True
        return slot

    def remove(self, key: Hashable) -> bool:
        """Forget a series (its pod is gone); its row is reused."""
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        self._t[slot] = np.nan
        self._count[slot] = 0
        self._head[slot] = 0
        self._brk[slot] = False
        self._used[slot] = False
        self._start.pop(slot, None)
        self._free.append(slot)
        return True

    # --- writing ----------------------------------------------------------------------------
    def add(self, key: Hashable, timestamp: float, cpu_usage_ns: int, memory_bytes: int,
            start_time: float | None = None) -> bool:
        """Append a sample; False (and nothing kept) when it is not newer than the series' latest."""
        if cpu_usage_ns < 0 or memory_bytes < 0:
            raise ValueError(f"sample for {key!r}: counters must not be negative "
                             f"(cpu {cpu_usage_ns}, memory {memory_bytes})")
        slot = self._slot(key)
        count = int(self._count[slot])
        head = int(self._head[slot])
        brk = False
        if count:
            last = (head - 1) % self.capacity
            last_t = float(self._t[slot, last])
            if not timestamp > last_t:
                return False
            previous_start = self._start.get(slot)
            restarted = start_time is not None and previous_start is not None and start_time != previous_start
            brk = restarted or cpu_usage_ns < int(self._cpu[slot, last])
        self._t[slot, head] = timestamp
        self._cpu[slot, head] = cpu_usage_ns
        self._mem[slot, head] = memory_bytes
        self._brk[slot, head] = brk
        self._head[slot] = (head + 1) % self.capacity
        self._count[slot] = min(count + 1, self.capacity)
        if start_time is not None:
            self._start[slot] = start_time
        return True

    # --- reading ----------------------------------------------------------------------------
    def samples(self, key: Hashable) -> list[tuple[float, int, int]]:
        """The series' samples, oldest first: (time, cumulative CPU ns, working set bytes)."""
        slot = self._slots.get(key)
        if slot is None:
            return []
        count = int(self._count[slot])
        head = int(self._head[slot])
        order = [(head - count + j) % self.capacity for j in range(count)]
        return [(float(self._t[slot, i]), int(self._cpu[slot, i]), int(self._mem[slot, i])) for i in order]

    def usage(self, key: Hashable, now: float, window: float) -> WindowUsage | None:
        """Usage of one series over (now - window, now]; None without a sample in the window."""
        slot = self._slots.get(key)
        if slot is None:
            return None
        rows = np.array([slot])
        return self._usage_rows(rows, now, window)[0]

    def usage_all(self, now: float, window: float) -> dict[Hashable, WindowUsage]:
        """Usage of every series with a sample in the window, computed for all series at once."""
        if not self._slots:
            return {}
        keys = list(self._slots)
        rows = np.fromiter((self._slots[k] for k in keys), np.int64, len(keys))
        results = self._usage_rows(rows, now, window)
        return {k: u for k, u in zip(keys, results, strict=True) if u is not None}

    def _usage_rows(self, rows: npt.NDArray[np.int64], now: float, window: float) -> list[WindowUsage | None]:
        cap = self.capacity
        count = self._count[rows]
        head = self._head[rows]
        j = np.arange(cap)
        idx = (head[:, None] - count[:, None] + j[None, :]) % cap  # oldest first
        present = j[None, :] < count[:, None]
        t = np.take_along_axis(self._t[rows], idx, 1)
        cpu = np.take_along_axis(self._cpu[rows], idx, 1)
        mem = np.take_along_axis(self._mem[rows], idx, 1)
        brk = np.take_along_axis(self._brk[rows], idx, 1)
        with np.errstate(invalid="ignore"):
            inside = present & (t > now - window) & (t <= now)
            dt = t[:, 1:] - t[:, :-1]
        dc = cpu[:, 1:] - cpu[:, :-1]
        ok = inside[:, 1:] & inside[:, :-1] & ~brk[:, 1:] & (dt > 0) & (dt <= self.max_gap) & (dc >= 0)
        used = np.where(ok, dc, 0).sum(axis=1)
        covered = np.where(ok, dt, 0.0).sum(axis=1)
        last = cap - 1 - np.argmax(inside[:, ::-1], axis=1)  # the latest sample inside the window
        take = np.arange(len(rows))
        out: list[WindowUsage | None] = []
        any_inside: list[bool] = np.asarray(inside.any(axis=1)).tolist()
        for any_in, u, cov, lt, lm in zip(any_inside, used.tolist(), covered.tolist(),
                                          t[take, last].tolist(), mem[take, last].tolist(), strict=True):
            if not any_in:
                out.append(None)
                continue
            cores = u / NANOS_PER_SECOND / cov if cov > 0 else None
            out.append(WindowUsage(cores, int(lm), float(lt), float(cov) if cores is not None else 0.0))
        return out
