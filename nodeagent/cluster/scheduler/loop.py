"""The batched scheduling loop: drain the queue in batches, sleep until the next pod is due.

Shared by the scheduler service's Binder (binder.py) and the control plane's Scheduler
(scheduling/scheduler.py). Up to BATCH pods (or BATCH_SECONDS) per turn of the event loop:
yielding after every pod costs a loop turn and a store hand-off each; a batch keeps the API's
latency under a few milliseconds all the same. With nothing due it waits for `wake` (set when a pod
is queued or the cluster changed) or for the next back-off to end, whichever comes first. A pod
whose cycle raises is logged (`schedule_cycle_failed`) and handed to `failed`; the loop goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

import structlog

from nodeagent.cluster.scheduler.queue import QueuedPod, SchedulingQueue
from nodeagent.core.clock import Clock
from nodeagent.core.waits import wait_for

log = structlog.get_logger(__name__)

T = TypeVar("T")

BATCH, BATCH_SECONDS = 64, 0.005  # most pods / longest time per turn of the event loop


async def run_batches(queue: SchedulingQueue[T], wake: asyncio.Event, clock: Clock,
                      schedule_one: Callable[[QueuedPod[T]], None],
                      failed: Callable[[QueuedPod[T]], None]) -> NoReturn:
    """Schedule pods as they become ready, until cancelled."""
    while True:
        qp = queue.pop()
        if qp is None:
            ready_at = queue.next_ready_at()
            wake.clear()
            timeout = None if ready_at is None else max(0.0, ready_at - clock.now())
            try:
                await wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass
            continue
        end, done = time.perf_counter() + BATCH_SECONDS, 0
        while qp is not None:
            try:
                schedule_one(qp)
            except Exception:
                log.exception("schedule_cycle_failed", pod=qp.key)
                failed(qp)
            done += 1
            qp = queue.pop() if done < BATCH and time.perf_counter() < end else None
        await asyncio.sleep(0)  # the API, the watches, the bindings and the agents' answers get their turn
