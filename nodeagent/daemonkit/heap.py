"""The daemon's start-up heap, frozen out of the cyclic collector's reach.

CPython's full (generation 2) collection walks every tracked object. In the agent that is ~70,000
objects after start-up (modules, classes, functions, config models), so one full collection
stopped the event loop, and with it an eviction pass or a pod start, for 30-54 ms
(bench/pod_start_bench.py with a gc callback; bench/README.md, "The start-up heap, frozen").
After `gc.freeze()` those objects sit in the permanent generation: full collections walk only
what was made since (pods, requests) and took 4-13 ms in the same run.

The collection first frees start-up's own cyclic garbage, so nothing unreachable is frozen (a
frozen cycle would never be collected). Objects made later are collected as usual.

glibc's malloc keeps what start-up freed (import-time temporaries, the collected garbage) in its
heap, and gives every thread that allocates an arena of its own (up to 8 per core), each holding
freed memory of its own. `trim_malloc()` after the freeze hands the free pages back; a cap of two
arenas (`cap_malloc_arenas()`, before any thread starts) keeps the executor threads' scraps in
shared heaps. Together ~2 MiB of the agent's RSS (bench/README.md, "The start-up heap, frozen").
Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc


def freeze_startup_heap() -> int:
    """Collect, then freeze everything alive now; how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


M_ARENA_MAX = -8  # mallopt parameters, glibc's malloc.h
M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def cap_malloc_arenas(arenas: int = 2) -> bool:
    """Let glibc's malloc make at most `arenas` arenas; False where that is not glibc."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, arenas) == 1)


def trim_malloc() -> bool:
    """Return malloc's free pages to the system now; True if glibc released any."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim is not None and trim(0) == 1)


def fix_mmap_threshold(size: int = 256 * 1024) -> bool:
    """Serve every allocation of `size` bytes or more with its own mapping, returned to the system
    when freed. glibc raises the threshold after each such block is freed (up to 32 MiB), so later
    big buffers (a LIST's 20 MB body, its items) come from the heap and stay in the RSS after
    they are freed; fixing it stops that. False where that is not glibc."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, size) == 1)


_trim_pending: set[asyncio.AbstractEventLoop] = set()


def trim_malloc_soon(delay: float = 1.0) -> None:
    """trim_malloc() once, `delay` seconds from now, however often asked meanwhile: after a big
    response is sent, what building it freed goes back to the system (one trim per burst)."""
    loop = asyncio.get_running_loop()
    if loop in _trim_pending:
        return
    _trim_pending.add(loop)

    def run() -> None:
        _trim_pending.discard(loop)
        trim_malloc()

    loop.call_later(delay, run)
