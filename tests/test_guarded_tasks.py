"""GuardedTasks: named tasks kept until they end, failures logged and loops' deaths surfaced."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from nodeagent.daemonkit.tasks import GuardedTasks


async def forever() -> None:
    await asyncio.Event().wait()


async def fail(after: float = 0) -> None:
    await asyncio.sleep(after)
    raise RuntimeError("boom")


async def test_a_task_is_kept_named_and_forgotten_when_it_ends() -> None:
    tasks = GuardedTasks("test")
    done = asyncio.Event()

    async def work() -> int:
        await done.wait()
        return 7

    task = tasks.start(work(), name="work")
    assert task.get_name() == "work" and len(tasks) == 1
    done.set()
    assert await task == 7
    await asyncio.sleep(0)
    assert len(tasks) == 0 and tasks.problems() == []


async def test_a_failure_is_logged_at_once_and_a_one_shot_failure_is_not_a_death() -> None:
    tasks = GuardedTasks("test")
    with structlog.testing.capture_logs() as logs:
        task = tasks.start(fail(), name="one-shot")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
    assert [(e["event"], e["task"], e["error"]) for e in logs] == [("task_failed", "one-shot", "RuntimeError('boom')")]
    assert tasks.problems() == []


async def test_a_loop_that_raises_or_returns_is_reported_as_dead() -> None:
    tasks = GuardedTasks("agent")
    crashed = tasks.start(fail(), name="eviction", forever=True)

    async def quits() -> None:
        return None

    returned = tasks.start(quits(), name="housekeeping", forever=True)
    alive = tasks.start(forever(), name="watchdog", forever=True)
    await asyncio.gather(crashed, returned, return_exceptions=True)
    await asyncio.sleep(0)
    assert tasks.problems() == ["task eviction died: RuntimeError('boom')", "task housekeeping died: returned"]
    assert not alive.done()
    await tasks.close()
    assert alive.cancelled()


async def test_close_cancels_and_waits_for_every_task_without_calling_it_a_death() -> None:
    tasks = GuardedTasks("test")
    cleaned: list[str] = []

    async def loop(name: str) -> None:
        try:
            await forever()
        finally:
            await asyncio.sleep(0.01)  # cleanup that itself awaits
            cleaned.append(name)

    for name in ("a", "b"):
        tasks.start(loop(name), name=name, forever=True)
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(cleaned) == ["a", "b"] and len(tasks) == 0
    assert tasks.problems() == []
    with pytest.raises(RuntimeError, match="being closed"):
        tasks.start(forever(), name="late")


async def test_close_waits_for_a_task_that_swallows_its_cancellation() -> None:
    tasks = GuardedTasks("test")
    finished = asyncio.Event()

    async def stubborn() -> None:
        try:
            await forever()
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            finished.set()

    tasks.start(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    await tasks.close()
    assert finished.is_set()


async def test_a_loop_cancelled_from_outside_is_a_death() -> None:
    tasks = GuardedTasks("test")
    task = tasks.start(forever(), name="eviction", forever=True)
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    assert tasks.problems() == ["task eviction died: cancelled"]


async def test_drain_waits_for_tasks_started_while_draining() -> None:
    tasks = GuardedTasks("test")
    order: list[str] = []

    async def second() -> None:
        await asyncio.sleep(0.01)
        order.append("second")

    async def first() -> None:
        tasks.start(second(), name="second")
        order.append("first")

    tasks.start(first(), name="first")
    await tasks.drain()
    assert order == ["first", "second"] and len(tasks) == 0
