"""core.waits.wait_for keeps a cancellation that asyncio.wait_for (3.11) loses when the awaited
event fires in the same loop iteration: the shape of every wake-or-resync loop in the daemons."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from nodeagent.core.waits import wait_for


async def _resync_loop(waiter: Callable[[Awaitable[Any], float], Awaitable[Any]], wake: asyncio.Event,
                       rounds: list[int]) -> None:
    while True:
        try:
            await waiter(wake.wait(), 30)
        except TimeoutError:
            pass
        wake.clear()
        rounds.append(1)


async def _cancel_while_woken(waiter: Callable[[Awaitable[Any], float], Awaitable[Any]]) -> bool:
    """True when the loop ended cancelled; False when it carried on after cancel()."""
    wake, rounds = asyncio.Event(), []  # type: ignore[var-annotated]
    task = asyncio.create_task(_resync_loop(waiter, wake, rounds))
    await asyncio.sleep(0.01)  # the loop waits on the event
    wake.set()
    task.cancel()  # same iteration: the event's waiter and the cancellation race
    done, _ = await asyncio.wait({task}, timeout=1.0)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    return task.cancelled()


async def test_a_cancel_that_races_a_wake_ends_the_loop() -> None:
    assert await _cancel_while_woken(wait_for)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 rebuilt asyncio.wait_for on asyncio.timeout")
async def test_asyncio_wait_for_on_3_11_loses_that_cancel() -> None:
    """Why core.waits exists: the stdlib's wait_for swallows the cancellation here."""
    assert not await _cancel_while_woken(asyncio.wait_for)


async def test_timeout_and_result_as_asyncio_wait_for() -> None:
    assert await wait_for(asyncio.sleep(0, "done"), 1) == "done"
    with pytest.raises(TimeoutError):
        await wait_for(asyncio.sleep(10), 0.01)
    assert await wait_for(asyncio.sleep(0.01, "no limit"), None) == "no limit"
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await wait_for(asyncio.shield(fut), 0.01)
    assert not fut.cancelled()  # shielded: only the wait was cut short
