"""Wake the eviction manager when memory gets tight, without waiting for its tick.

Each notifier arms one kernel mechanism on the asyncio loop and calls `wake(name)`:

    PsiNotifier              /proc/pressure/memory or a cgroup2 memory.pressure (PSI trigger)
    MemcgThresholdNotifier   cgroup v1 memory.usage_in_bytes thresholds (eventfd)
    MemoryEventsNotifier     cgroup v2 memory.events counters (inotify), with set_memory_high()

and AdaptivePoll is the floor: the manager's next_interval(observations), shrinking as headroom
shrinks or fill rate grows. Usage, in the manager:

    wake = event_waker(manager.wake)
    armed, unavailable = await start_all([PsiNotifier(wake), MemoryEventsNotifier(wake, pods_dir)])
    ...
    await asyncio.wait_for(manager.wake.wait(), poll(observations))   # poll = AdaptivePoll(...)

May import: eviction's ranking, evaluate and observations (below it in eviction's contract; not
signals beside it, nor manager or wakeups above), config, node, cgroups, core, daemonkit.
"""

from nodeagent.agent.eviction.notify.adaptive import AdaptivePoll, FillRate, next_interval, rate_floor
from nodeagent.agent.eviction.notify.base import (
    KernelNotifier,
    NotifierUnavailable,
    WakeFn,
    close_all,
    event_waker,
    start_all,
)
from nodeagent.agent.eviction.notify.memcg_v1 import MemcgThresholdNotifier
from nodeagent.agent.eviction.notify.memory_events import MemoryEventsNotifier, set_memory_high
from nodeagent.agent.eviction.notify.psi import PSI_SYSTEM_MEMORY, PsiNotifier

__all__ = [
    "PSI_SYSTEM_MEMORY",
    "AdaptivePoll",
    "FillRate",
    "KernelNotifier",
    "MemcgThresholdNotifier",
    "MemoryEventsNotifier",
    "NotifierUnavailable",
    "PsiNotifier",
    "WakeFn",
    "close_all",
    "event_waker",
    "next_interval",
    "rate_floor",
    "set_memory_high",
    "start_all",
]
