"""freeze_startup_heap: start-up's cyclic garbage is collected, not frozen; what is alive is frozen;
objects made afterwards are still collected. Run in a child: freezing is process-wide."""

from __future__ import annotations

import subprocess
import sys

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
