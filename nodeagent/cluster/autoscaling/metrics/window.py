"""The server's short in-memory window of the agents' samples: one ring buffer per series.

A series is one container, pod or node (the key is the caller's: a tuple such as
("ns", "pod", "container") works). Each sample holds the time it was read, the cumulative CPU
counter (nanoseconds), the memory working set (bytes) and whether a restart separates it from the
previous one. The rules for a usable pair of samples are those of metrics.rate.

Why numpy and not a deque per series: 10,000 pods with their containers are tens of thousands of
series, sampled every second. One 2-D array per field (series x capacity) keeps that in a few
contiguous blocks (25 bytes a sample, no Python object per sample); `add_many` writes one agent's
report (every series of a node) with a handful of vectorised operations, and `usage_all` computes
every series' rate over a window the same way, pairing each ring slot with the one before it (a
sample older than its predecessor is the ring's wrap-around and pairs with nothing), so no
reordering is needed. bench/metrics_bench.py measures both against a dict of deques.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
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
        rows = max(1, initial_series)
        self._slots: dict[Hashable, int] = {}
        self._free: list[int] = list(range(rows - 1, -1, -1))
        self._t: npt.NDArray[np.float64] = np.full((rows, capacity), np.nan)
        self._cpu: npt.NDArray[np.int64] = np.zeros((rows, capacity), np.int64)
        self._mem: npt.NDArray[np.int64] = np.zeros((rows, capacity), np.int64)
        self._brk: npt.NDArray[np.bool_] = np.zeros((rows, capacity), np.bool_)
        self._head: npt.NDArray[np.int64] = np.zeros(rows, np.int64)  # next write position
        self._count: npt.NDArray[np.int64] = np.zeros(rows, np.int64)
        self._start: npt.NDArray[np.float64] = np.full(rows, np.nan)  # start time of the latest sample

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
        return sum(a.nbytes for a in (self._t, self._cpu, self._mem, self._brk, self._head, self._count, self._start))

    def _grow(self) -> None:
        rows = self._t.shape[0]

        def more(a: npt.NDArray[np.generic], fill: object) -> npt.NDArray[np.generic]:
            return np.concatenate([a, np.full((rows, *a.shape[1:]), fill, dtype=a.dtype)])

        self._t = more(self._t, np.nan)  # type: ignore[assignment]
        self._cpu = more(self._cpu, 0)  # type: ignore[assignment]
        self._mem = more(self._mem, 0)  # type: ignore[assignment]
        self._brk = more(self._brk, False)  # type: ignore[assignment]
        self._head = more(self._head, 0)  # type: ignore[assignment]
        self._count = more(self._count, 0)  # type: ignore[assignment]
        self._start = more(self._start, np.nan)  # type: ignore[assignment]
        self._free.extend(range(2 * rows - 1, rows - 1, -1))

    def _slot(self, key: Hashable) -> int:
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slots[key] = slot
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
        self._start[slot] = np.nan
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
            if not timestamp > float(self._t[slot, last]):
                return False
            previous_start = float(self._start[slot])
            restarted = start_time is not None and previous_start == previous_start and start_time != previous_start
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

    def add_many(self, keys: Sequence[Hashable], timestamps: Sequence[float] | float, cpu_usage_ns: Sequence[int],
                 memory_bytes: Sequence[int], start_times: Sequence[float | None] | None = None) -> list[bool]:
        """Append one sample to each of `keys` (distinct): one agent report. Returns which were kept.

        A sample not newer than its series' latest is dropped; a counter that went down, or a start
        time that changed, marks a restart (no rate across it).
        """
        n = len(keys)
        cpu = np.asarray(cpu_usage_ns, dtype=np.int64)
        mem = np.asarray(memory_bytes, dtype=np.int64)
        ts = np.broadcast_to(np.asarray(timestamps, dtype=np.float64), (n,))
        if cpu.shape != (n,) or mem.shape != (n,):
            raise ValueError(f"{n} keys but {cpu.shape[0] if cpu.ndim else 0} cpu and "
                             f"{mem.shape[0] if mem.ndim else 0} memory values")
        if n and (cpu.min() < 0 or mem.min() < 0):
            bad = int(np.argmax((cpu < 0) | (mem < 0)))
            raise ValueError(f"sample for {keys[bad]!r}: counters must not be negative "
                             f"(cpu {int(cpu[bad])}, memory {int(mem[bad])})")
        if start_times is None:
            starts = np.full(n, np.nan)
        else:
            starts = np.array([np.nan if s is None else s for s in start_times], dtype=np.float64)
        slots = np.fromiter((self._slot(k) for k in keys), np.int64, n)
        if len(np.unique(slots)) != n:
            raise ValueError("add_many: a key appears twice in one batch")
        count = self._count[slots]
        head = self._head[slots]
        last = (head - 1) % self.capacity
        last_t = self._t[slots, last]
        seen = count > 0
        keep = ~seen | (ts > last_t)
        restarted = seen & ~np.isnan(starts) & ~np.isnan(self._start[slots]) & (starts != self._start[slots])
        brk = seen & (restarted | (cpu < self._cpu[slots, last]))
        s, h = slots[keep], head[keep]
        self._t[s, h] = ts[keep]
        self._cpu[s, h] = cpu[keep]
        self._mem[s, h] = mem[keep]
        self._brk[s, h] = brk[keep]
        self._head[s] = (h + 1) % self.capacity
        self._count[s] = np.minimum(count[keep] + 1, self.capacity)
        known = keep & ~np.isnan(starts)
        self._start[slots[known]] = starts[known]
        kept: list[bool] = keep.tolist()
        return kept

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
        return self._usage_rows(np.array([slot]), now, window)[0]

    def usage_many(self, keys: Sequence[Hashable], now: float, window: float) -> list[WindowUsage | None]:
        """usage() of several series in one vectorised pass over their rows (an HPA's pods)."""
        slots = [self._slots.get(k) for k in keys]
        known = [s for s in slots if s is not None]
        if not known:
            return [None] * len(slots)
        results = iter(self._usage_rows(np.array(known, dtype=np.int64), now, window))
        return [None if s is None else next(results) for s in slots]

    def usage_all(self, now: float, window: float) -> dict[Hashable, WindowUsage]:
        """Usage of every series with a sample in the window, computed for all series at once."""
        if not self._slots:
            return {}
        results = self._usage_rows(None, now, window)  # every row, used or not: no copies
        return {k: u for k, slot in self._slots.items() if (u := results[slot]) is not None}

    def _usage_rows(self, rows: npt.NDArray[np.int64] | None, now: float, window: float) -> list[WindowUsage | None]:
        t = self._t if rows is None else self._t[rows]
        cpu = self._cpu if rows is None else self._cpu[rows]
        brk = self._brk if rows is None else self._brk[rows]
        mem = self._mem if rows is None else self._mem[rows]
        with np.errstate(invalid="ignore"):
            inside = (t > now - window) & (t <= now)  # NaN (unused slots) is never inside
            prev_t = np.roll(t, 1, axis=1)
            dt = t - prev_t
        dc = cpu - np.roll(cpu, 1, axis=1)
        ok = inside & np.roll(inside, 1, axis=1) & ~brk & (dt > 0) & (dt <= self.max_gap) & (dc >= 0)
        used = np.where(ok, dc, 0).sum(axis=1)
        covered = np.where(ok, dt, 0.0).sum(axis=1)
        latest = np.where(inside, t, -np.inf).argmax(axis=1)
        take = np.arange(t.shape[0])
        any_inside: list[bool] = np.asarray(inside.any(axis=1)).tolist()
        last_t: list[float] = t[take, latest].tolist()
        last_mem: list[int] = mem[take, latest].tolist()
        out: list[WindowUsage | None] = []
        for any_in, u, cov, lt, lm in zip(any_inside, used.tolist(), covered.tolist(), last_t, last_mem, strict=True):
            if not any_in:
                out.append(None)
            elif cov > 0:
                out.append(WindowUsage(u / NANOS_PER_SECOND / cov, lm, lt, cov))
            else:
                out.append(WindowUsage(None, lm, lt, 0.0))
        return out
