"""The daemon's start-up heap, frozen out of the cyclic collector's reach.

CPython's full (generation 2) collection walks every tracked object. In the agent that is ~70,000
objects after start-up (modules, classes, functions, config models), so one full collection
stopped the event loop, and with it an eviction pass or a pod start, for 30-54 ms
(bench/pod_start_bench.py with a gc callback; bench/README.md, "The start-up heap, frozen").
After `gc.freeze()` those objects sit in the permanent generation: full collections walk only
what was made since (pods, requests) and took 4-13 ms in the same run.

The collection first frees start-up's own cyclic garbage, so nothing unreachable is frozen (a
frozen cycle would never be collected). Objects made later are collected as usual.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect, then freeze everything alive now; how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
