"""Property test: random transactions (submitted in concurrent groups, so the SQLite store batches
them), compactions, reads at every revision and watches from every revision agree with a model
written independently of the store's code: a dict per revision and a list of events."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.cluster.storage.interface import (
    Compacted,
    Compare,
    DeleteKey,
    Get,
    KeyValue,
    Op,
    Put,
    Store,
    TxnResult,
)
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore

KEYS = ["/a", "/a/b", "/a/c", "/b", "/b/a", "/c"]
PREFIXES = ["", "/a", "/a/", "/b", "/c", "/d"]


@dataclass
class Model:
    revision: int = 0
    states: list[dict[str, KeyValue]] = field(default_factory=lambda: [{}])
    events: list[list[tuple[str, KeyValue, KeyValue | None]]] = field(default_factory=lambda: [[]])

    def holds(self, c: Compare) -> bool:
        kv = self.states[-1].get(c.key)
        if c.target == "value":
            if kv is None:
                return False
            actual: int | bytes = kv.value
        else:
            actual = getattr(kv, c.target) if kv else 0
        return {"=": actual == c.value, "!=": actual != c.value,
                "<": actual < c.value, ">": actual > c.value}[c.result]  # type: ignore[operator]

    def txn(self, compares: list[Compare], success: list[Op], failure: list[Op]) -> TxnResult:
        ok = all(self.holds(c) for c in compares)
        state = dict(self.states[-1])
        rev = self.revision + 1
        responses: list[KeyValue | None] = []
        events: list[tuple[str, KeyValue, KeyValue | None]] = []
        for op in success if ok else failure:
            cur = state.get(op.key)
            responses.append(cur)
            if isinstance(op, Put):
                new = KeyValue(op.key, op.value, cur.create_revision if cur else rev, rev, cur.version + 1 if cur else 1)
                state[op.key] = new
                events.append(("PUT", new, cur))
            elif isinstance(op, DeleteKey) and cur is not None:
                del state[op.key]
                events.append(("DELETE", KeyValue(op.key, b"", 0, rev, 0), cur))
        if events:
            self.revision = rev
            self.states.append(state)
            self.events.append(events)
        return TxnResult(ok, self.revision, tuple(responses))


def ops(draw: st.DrawFn) -> list[Op]:
    out: list[Op] = []
    written: set[str] = set()
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(KEYS))
        kind = draw(st.sampled_from(["put", "put", "delete", "get"]))
        if kind == "get":
            out.append(Get(key))
        elif key not in written:
            written.add(key)
            out.append(Put(key, draw(st.binary(max_size=3))) if kind == "put" else DeleteKey(key))
    return out


@st.composite
def txns(draw: st.DrawFn) -> tuple[list[Compare], list[Op], list[Op]]:
    compares = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(KEYS))
        target = draw(st.sampled_from(["mod_revision", "create_revision", "version", "value"]))
        value = draw(st.binary(max_size=2)) if target == "value" else draw(st.integers(0, 6))
        compares.append(Compare(key, target, draw(st.sampled_from(["=", "!=", "<", ">"])), value))
    return compares, ops(draw), ops(draw)


steps = st.lists(st.one_of(st.lists(txns(), min_size=1, max_size=4), st.integers(0, 40)), max_size=25)


async def check(store: Store, plan: list) -> None:
    model = Model()
    compacted = 0
    for step in plan:
        if isinstance(step, int):  # compact at a revision the model can place
            target = min(step, model.revision)
            if target > compacted:
                await store.compact(target)
                compacted = target
            continue
        got = await asyncio.gather(*(store.txn(*t) for t in step))  # one group: submission order
        want = [model.txn(*t) for t in step]
        assert list(got) == want
    assert (store.revision, store.compacted_revision) == (model.revision, compacted)
    for rev in range(model.revision + 1):
        if 0 < rev < compacted:
            with pytest.raises(Compacted):
                await store.range("", revision=rev)
            continue
        at = rev or model.revision
        for prefix in PREFIXES:
            expect = sorted((kv for k, kv in model.states[at].items() if k.startswith(prefix)), key=lambda kv: kv.key)
            r = await store.range(prefix, revision=rev)
            assert (list(r.kvs), r.count, r.more) == (expect, len(expect), False)
            r = await store.range(prefix, revision=rev, limit=1, start_key="/a/b")
            rest = [kv for kv in expect if kv.key >= "/a/b"]
            assert (list(r.kvs), r.count, r.more) == (rest[:1], len(rest), len(rest) > 1)
        for key in KEYS:
            assert await store.get(key, revision=rev) == (model.states[at].get(key), at)
    for start in range(compacted + 1, model.revision + 1):
        for prefix in ("", "/a/"):
            want_events = [(t, kv, prev) for r in range(start, model.revision + 1) for t, kv, prev in model.events[r]
                           if kv.key.startswith(prefix)]
            w = store.watch(prefix, start)
            seen = []
            for _ in want_events:
                ev = await asyncio.wait_for(w.__anext__(), 5)
                seen.append((ev.type, ev.kv, ev.prev_kv))
            assert seen == want_events
            await w.aclose()  # type: ignore[attr-defined]


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=150, **SETTINGS)  # type: ignore[arg-type]
@given(steps)
def test_memory_store_agrees_with_the_model(plan: list) -> None:
    async def run() -> None:
        store = MemoryStore()
        await check(store, plan)
        await store.close()

    asyncio.run(run())


@settings(max_examples=40, **SETTINGS)  # type: ignore[arg-type]
@given(steps, st.sampled_from([2, 8192]))
def test_sqlite_store_agrees_with_the_model_and_so_does_its_reopened_self(plan: list, ring: int) -> None:
    async def run(path: str) -> None:
        store = await SqliteStore.open(path, history_size=ring, writer="thread")
        await check(store, plan)
        await store.close()
        store = await SqliteStore.open(path, history_size=ring, writer="thread")
        await check_reopened(store, plan)
        await store.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(f"{tmp}/s.db"))


async def check_reopened(store: Store, plan: list) -> None:
    """The reopened store has the same state at every revision left after compaction."""
    model = Model()
    compacted = 0
    for step in plan:
        if isinstance(step, int):
            compacted = max(compacted, min(step, model.revision))
        else:
            for t in step:
                model.txn(*t)
    assert (store.revision, store.compacted_revision) == (model.revision, compacted)
    for rev in range(max(1, compacted), model.revision + 1):
        r = await store.range("", revision=rev)
        assert list(r.kvs) == sorted(model.states[rev].values(), key=lambda kv: kv.key)
