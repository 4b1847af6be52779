"""`wait_for` without Python 3.11's lost cancellation.

On 3.11, `asyncio.wait_for` returns the inner result when its task is cancelled in the same loop
iteration as the awaited thing completes (CPython gh-86296; 3.12 rebuilt it on `asyncio.timeout`).
A loop around `wait_for(event.wait(), t)` then carries on as if it had never been cancelled: the
agent's pod-sync loop outlived its cancellation that way, woken by the pod deletes that came with
the shutdown (an in-process agent still running 60 s after it was stopped, in the unit suite and in
CI). `asyncio.timeout` keeps the cancellation, so every timed wait in the daemons goes through here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:  # noqa: ASYNC109 - asyncio.wait_for's shape
    """Await `aw` for at most `timeout` seconds (None: no limit); TimeoutError after that, with
    `aw` cancelled, as asyncio.wait_for; a cancellation of the caller always propagates."""
    async with asyncio.timeout(timeout):
        return await aw
