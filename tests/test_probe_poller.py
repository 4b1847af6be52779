"""The probes' grid poller on a real loop with a 10 ms grid: every pending check is called once
per tick, on the grid, until it says done; its error reaches the waiter; a cancelled wait is
dropped; no timer stays armed when nothing is pending."""

from __future__ import annotations

import asyncio
import math

import pytest

from nodeagent.agent.probes.poller import GridPoller, poller, until
from nodeagent.agent.probes.runner import COALESCE_S

GRID = 0.01


def on_grid(t: float) -> bool:
    steps = t / GRID
    return abs(steps - round(steps)) < 1e-6


async def test_checks_run_once_per_tick_on_the_grid_until_done() -> None:
    loop = asyncio.get_running_loop()
    p = GridPoller(loop, GRID)
    calls: dict[str, list[float]] = {"a": [], "b": []}

    def check(name: str, done_after: int) -> bool:
        calls[name].append(loop.time())
        return len(calls[name]) >= done_after

    await asyncio.gather(p.wait(lambda: check("a", 3)), p.wait(lambda: check("b", 1)))
    assert [len(calls["a"]), len(calls["b"])] == [3, 1]
    assert abs(calls["b"][0] - calls["a"][0]) < GRID / 2  # both looked at in the same tick
    steps = [math.floor(t / GRID + 1e-3) for t in calls["a"]]  # a late tick is followed by the next grid point
    assert steps == sorted(set(steps))  # one look per grid step at most
    assert p._timer is None  # nothing pending: no timer left


async def test_ticks_fall_on_multiples_of_the_grid() -> None:
    loop = asyncio.get_running_loop()
    p = GridPoller(loop, GRID)
    seen: list[float] = []
    armed: list[float] = []
    call_at = loop.call_at

    def spy(when: float, callback: object, *args: object) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, callback, *args)  # type: ignore[arg-type]

    loop.call_at = spy  # type: ignore[method-assign]
    try:
        await p.wait(lambda: seen.append(loop.time()) or len(seen) == 2)
    finally:
        del loop.call_at
    assert len(armed) == 2 and all(on_grid(t) for t in armed)
    assert all(t >= w for t, w in zip(seen, armed, strict=True))


async def test_an_error_in_a_check_reaches_the_waiter() -> None:
    p = GridPoller(asyncio.get_running_loop(), GRID)

    def broken() -> bool:
        raise ConnectionResetError("reset by peer")

    with pytest.raises(ConnectionResetError, match="reset by peer"):
        await p.wait(broken)


async def test_a_cancelled_wait_is_dropped() -> None:
    p = GridPoller(asyncio.get_running_loop(), GRID)
    calls: list[int] = []
    fut = p.wait(lambda: calls.append(1) or False)
    fut.cancel()
    await asyncio.sleep(GRID * 3)
    assert calls == []
    assert p._timer is None


async def test_until_cancels_its_wait_when_the_waiter_is_cancelled() -> None:
    calls: list[int] = []
    task = asyncio.ensure_future(until(lambda: calls.append(1) or False))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert poller()._pending[0][1].cancelled()  # dropped at the next tick, never looked at
    await asyncio.sleep(COALESCE_S * 1.5)
    assert calls == [] and not poller()._pending
