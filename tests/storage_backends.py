"""The Store backends the conformance suite runs against, and helpers the storage tests share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from nodeagent.cluster.storage.interface import Event, Put, Store
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore


@dataclass
class Backend:
    """How to open one backend; `durable` ones can be closed and opened again on the same data."""

    name: str
    tmp: Path
    history_size: int = 8192
    writer: str = "process"

    @property
    def durable(self) -> bool:
        return self.name != "memory"

    async def open(self) -> Store:
        if self.name == "memory":
            return MemoryStore()
        return await SqliteStore.open(str(self.tmp / "store.db"), history_size=self.history_size,
                                      writer=self.writer)  # type: ignore[arg-type]


BACKENDS = {
    "memory": {},
    "sqlite": {"writer": "process"},  # the default
    # a ring of 2 revisions (old reads and watches come from the SQLite log), the writer thread
    "sqlite-ring2": {"history_size": 2, "writer": "thread"},
}


def make_backend(name: str, tmp: Path) -> Backend:
    return Backend("memory" if name == "memory" else "sqlite", tmp, **BACKENDS[name])  # type: ignore[arg-type]


async def put(store: Store, key: str, value: bytes | str) -> int:
    data = value.encode() if isinstance(value, str) else value
    return (await store.txn([], [Put(key, data)])).revision


async def take(it: AsyncIterator[Event], n: int, timeout: float = 5.0) -> list[Event]:
    out = []
    for _ in range(n):
        out.append(await asyncio.wait_for(it.__anext__(), timeout))
    return out


async def nothing_more(it: AsyncIterator[Event], wait: float = 0.05) -> bool:
    """True if the watch yields nothing within `wait` seconds (the pending read is cancelled)."""
    task = asyncio.ensure_future(it.__anext__())
    done, _ = await asyncio.wait([task], timeout=wait)
    if done:
        return False
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, StopAsyncIteration):
        pass
    return True
