"""The periodic compactor: each period compacts to the revision seen a period before (fake clock)."""

from __future__ import annotations

import asyncio

import pytest
from storage_backends import put

from nodeagent.cluster.storage.compactor import Compactor
from nodeagent.cluster.storage.interface import Compacted
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock


async def test_each_period_compacts_to_the_revision_of_the_period_before() -> None:
    store, clock = MemoryStore(), FakeClock()
    compactor = Compactor(store, interval=300, clock=clock)
    for i in range(5):
        await put(store, "/k", str(i))
    assert await compactor.tick() is None  # no period has passed
    clock.advance(300)
    assert await compactor.tick() is None  # first period: remembers revision 5, compacts nothing
    for i in range(3):
        await put(store, "/k", str(i))
    clock.advance(299)
    assert await compactor.tick() is None
    clock.advance(1)
    assert await compactor.tick() == 5 and store.compacted_revision == 5
    with pytest.raises(Compacted):
        await store.get("/k", revision=4)
    assert (await store.range("/", revision=6)).count == 1  # a period of history stays
    clock.advance(300)
    assert await compactor.tick() == 8
    clock.advance(300)
    assert await compactor.tick() is None  # nothing written in the last period


async def test_a_compaction_done_elsewhere_meanwhile_is_not_an_error() -> None:
    store, clock = MemoryStore(), FakeClock()
    compactor = Compactor(store, interval=10, clock=clock)
    await put(store, "/a", "1")
    await put(store, "/a", "2")
    clock.advance(10)
    await compactor.tick()
    await store.compact(2)
    clock.advance(10)
    assert await compactor.tick() is None


async def test_run_ticks_every_period() -> None:
    store = MemoryStore()
    compactor = Compactor(store, interval=0.01)
    await put(store, "/a", "1")
    task = asyncio.ensure_future(compactor.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if store.compacted_revision == 1:
                break
        assert store.compacted_revision == 1
    finally:
        task.cancel()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        Compactor(MemoryStore(), interval=0)
