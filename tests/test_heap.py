"""freeze_startup_heap: start-up's cyclic garbage is collected, not frozen; what is alive is frozen;
objects made afterwards are still collected. Run in a child: freezing is process-wide (as are
malloc's settings, also tried in children)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from nodeagent.daemonkit import heap

CHILD = """
import gc, weakref
from nodeagent.daemonkit.heap import freeze_startup_heap

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

gc.disable()                      # only the explicit collections below run
garbage = cycle()                 # unreachable before the freeze
kept = Node(); kept.self = kept   # reachable: frozen
frozen = freeze_startup_heap()
assert garbage() is None, "start-up's cyclic garbage was frozen instead of collected"
assert frozen == gc.get_freeze_count() > 1000, frozen
later = cycle()                   # made after the freeze: a full collection still frees it
gc.collect()
assert later() is None, "an object made after the freeze was not collected"
assert gc.get_freeze_count() == frozen
print("ok", frozen)
"""


def test_freeze_collects_first_and_leaves_later_objects_collectable() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok "), out.stdout


TRIM_CHILD = """
from nodeagent.daemonkit.heap import cap_malloc_arenas, trim_malloc

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

assert cap_malloc_arenas(), "mallopt(M_ARENA_MAX) refused"
blocks = [bytes(2000) + bytes([i % 256]) for i in range(20000)]  # ~40 MiB from malloc's heap, not pymalloc
kept = [bytes(2000) + b"k" for _ in range(100)]  # above them: the heap's top cannot shrink by itself
del blocks
before = rss_kib()
assert trim_malloc(), "malloc_trim released nothing"
after = rss_kib()
assert before - after > 20 * 1024, (before, after)
print("ok", before, after)
"""


def test_trim_gives_freed_heap_pages_back() -> None:
    """glibc keeps freed blocks under a live one; malloc_trim returns their pages (RSS drops)."""
    out = subprocess.run([sys.executable, "-c", TRIM_CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok "), out.stdout


MMAP_CHILD = """
from nodeagent.daemonkit.heap import fix_mmap_threshold

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

FIX = {fix}
if FIX:
    assert fix_mmap_threshold(256 * 1024), "mallopt(M_MMAP_THRESHOLD) refused"
del bytearray(8 << 20)[:]  # a big block freed: glibc now serves blocks up to its size from the heap
big = bytearray(8 << 20)
del big
blocks = [bytearray(512 * 1024) for _ in range(60)]  # 30 MiB in blocks a LIST's body could be
for b in blocks:
    b[::4096] = b"x" * len(b[::4096])  # touched: resident
kept = bytearray(1000)  # above them: the heap's top cannot shrink by itself
before = rss_kib()
del blocks
after = rss_kib()
print("ok", before - after)
"""


def _freed_kib(fix: bool) -> int:
    out = subprocess.run([sys.executable, "-c", MMAP_CHILD.format(fix=fix)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok "), out.stdout
    return int(out.stdout.split()[1])


def test_a_fixed_mmap_threshold_returns_big_blocks_when_freed() -> None:
    """glibc's dynamic threshold keeps freed big blocks in the heap (RSS stays); fixed, they go back."""
    assert _freed_kib(fix=False) < 10 * 1024
    assert _freed_kib(fix=True) > 25 * 1024


async def test_trim_soon_trims_once_per_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(heap, "trim_malloc", lambda: calls.append(1) or True)
    for _ in range(3):
        heap.trim_malloc_soon(0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [1]
    heap.trim_malloc_soon(0)  # a later burst trims again
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [1, 1]
