"""The Store contract (nodeagent/cluster/storage/interface.py), run against every backend.

"sqlite-ring2" keeps 2 revisions in memory, so its reads at old revisions and its watches from
old revisions come from the SQLite log rather than from the in-memory ring.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from storage_backends import BACKENDS, Backend, make_backend, nothing_more, put, take

from nodeagent.cluster.storage.interface import (
    Compacted,
    Compare,
    DeleteKey,
    Event,
    FutureRevision,
    Get,
    KeyValue,
    Put,
    Store,
    StoreError,
)


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture(params=[name for name in BACKENDS if name != "memory"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    s = await backend.open()
    yield s
    await s.close()


def kv(key: str, value: bytes, create: int, mod: int, version: int) -> KeyValue:
    return KeyValue(key, value, create, mod, version)


# -- revisions, txn responses, create/mod revision and version


async def test_every_writing_txn_takes_the_next_revision_and_all_its_writes_share_it(store: Store) -> None:
    assert store.revision == 0
    r1 = await store.txn([], [Put("/a", b"1")])
    assert (r1.succeeded, r1.revision, r1.responses) == (True, 1, (None,))
    r2 = await store.txn([], [Put("/b", b"2"), Put("/c", b"3"), Get("/a")])
    assert r2.revision == 2 and store.revision == 2
    assert r2.responses == (None, None, kv("/a", b"1", 1, 1, 1))
    got = await store.range("/")
    assert [(k.key, k.mod_revision) for k in got.kvs] == [("/a", 1), ("/b", 2), ("/c", 2)]


async def test_read_only_txns_and_deletes_of_missing_keys_take_no_revision(store: Store) -> None:
    await put(store, "/a", "1")
    r = await store.txn([], [Get("/a"), Get("/nope")])
    assert (r.revision, r.responses) == (1, (kv("/a", b"1", 1, 1, 1), None))
    r = await store.txn([], [DeleteKey("/nope")])
    assert (r.succeeded, r.revision, r.responses) == (True, 1, (None,))
    r = await store.txn([Compare("/a", "version", "=", 7)], [Put("/a", b"x")])  # failure branch empty
    assert (r.succeeded, r.revision, r.responses) == (False, 1, ())
    assert store.revision == 1


async def test_put_delete_get_responses_and_versions_through_a_key_lifetime(store: Store) -> None:
    assert (await store.txn([], [Put("/k", b"v1")])).responses == (None,)
    r = await store.txn([], [Put("/k", b"v2")])
    assert r.responses == (kv("/k", b"v1", 1, 1, 1),)
    assert (await store.get("/k")) == (kv("/k", b"v2", 1, 2, 2), 2)
    r = await store.txn([], [Get("/k"), DeleteKey("/k"), Get("/k")])
    assert r.revision == 3
    assert r.responses == (kv("/k", b"v2", 1, 2, 2), kv("/k", b"v2", 1, 2, 2), None)
    assert (await store.get("/k")) == (None, 3)
    await put(store, "/k", "v3")  # re-created: a new life, version starts again
    assert (await store.get("/k")) == (kv("/k", b"v3", 4, 4, 1), 4)
    r = await store.txn([], [Put("/k", b"v3")])  # same value: still a write
    assert r.revision == 5 and (await store.get("/k"))[0] == kv("/k", b"v3", 4, 5, 2)


async def test_a_get_after_a_put_in_one_txn_sees_the_put(store: Store) -> None:
    r = await store.txn([], [Put("/k", b"new"), Get("/k")])
    assert r.responses == (None, kv("/k", b"new", 1, 1, 1))


# -- compare and swap


@pytest.mark.parametrize(("target", "result", "value", "holds"), [
    ("mod_revision", "=", 2, True), ("mod_revision", "=", 1, False), ("mod_revision", "!=", 1, True),
    ("mod_revision", "<", 3, True), ("mod_revision", "<", 2, False), ("mod_revision", ">", 1, True),
    ("create_revision", "=", 1, True), ("create_revision", ">", 1, False),
    ("version", "=", 2, True), ("version", "<", 2, False), ("version", "!=", 2, False),
    ("value", "=", b"v2", True), ("value", "=", b"v1", False), ("value", "!=", b"v1", True),
    ("value", ">", b"v1", True), ("value", "<", b"v1", False),
])
async def test_compare_on_an_existing_key_picks_the_branch(store: Store, target: str, result: str,
                                                           value: int | bytes, holds: bool) -> None:
    await put(store, "/k", "v1")
    await put(store, "/k", "v2")  # create_revision 1, mod_revision 2, version 2
    r = await store.txn([Compare("/k", target, result, value)],  # type: ignore[arg-type]
                        [Put("/ok", b"s")], [Put("/no", b"f"), Get("/k")])
    assert r.succeeded is holds and r.revision == 3
    assert (await store.get("/ok"))[0] is not None if holds else (await store.get("/no"))[0] is not None
    if not holds:
        assert r.responses == (None, kv("/k", b"v2", 1, 2, 2))


@pytest.mark.parametrize(("compare", "holds"), [
    (Compare("/missing", "create_revision", "=", 0), True),  # the create-only-if-absent idiom
    (Compare("/missing", "mod_revision", "=", 0), True),
    (Compare("/missing", "version", "=", 0), True),
    (Compare("/missing", "version", ">", 0), False),
    (Compare("/missing", "value", "=", b""), False),  # etcd: value compares on a missing key fail
    (Compare("/missing", "value", "!=", b"x"), False),
])
async def test_compare_on_a_missing_key(store: Store, compare: Compare, holds: bool) -> None:
    r = await store.txn([compare], [Put("/s", b"")], [Put("/f", b"")])
    assert r.succeeded is holds


async def test_all_compares_must_hold(store: Store) -> None:
    await put(store, "/a", "1")
    await put(store, "/b", "1")
    both = [Compare("/a", "mod_revision", "=", 1), Compare("/b", "mod_revision", "=", 2)]
    assert (await store.txn(both, [Put("/x", b"")])).succeeded
    one_wrong = [Compare("/a", "mod_revision", "=", 1), Compare("/b", "mod_revision", "=", 1)]
    assert not (await store.txn(one_wrong, [Put("/y", b"")])).succeeded


async def test_cas_update_with_a_stale_mod_revision_fails_and_changes_nothing(store: Store) -> None:
    await put(store, "/k", "v1")
    await put(store, "/k", "v2")
    r = await store.txn([Compare("/k", "mod_revision", "=", 1)], [Put("/k", b"v3")], [Get("/k")])
    assert not r.succeeded and r.responses == (kv("/k", b"v2", 1, 2, 2),)
    assert store.revision == 2 and (await store.get("/k"))[0] == kv("/k", b"v2", 1, 2, 2)


async def test_concurrent_cas_on_one_key_exactly_one_wins_each_round(store: Store) -> None:
    await put(store, "/counter", "0")
    for rnd in range(5):
        current, _ = await store.get("/counter")
        assert current is not None

        async def bump(i: int, seen: KeyValue = current, rnd: int = rnd) -> bool:
            r = await store.txn([Compare("/counter", "mod_revision", "=", seen.mod_revision)],
                                [Put("/counter", f"{rnd}:{i}".encode())])
            return r.succeeded

        wins = await asyncio.gather(*(bump(i) for i in range(40)))
        assert sum(wins) == 1, f"round {rnd}: {sum(wins)} winners"
        after, _ = await store.get("/counter")
        assert after is not None and after.version == current.version + 1
        assert after.value == f"{rnd}:{wins.index(True)}".encode()


async def test_concurrent_creates_of_one_name_create_it_once(store: Store) -> None:
    results = await asyncio.gather(*(
        store.txn([Compare("/pod", "create_revision", "=", 0)], [Put("/pod", str(i).encode())], [Get("/pod")])
        for i in range(30)))
    assert [r.succeeded for r in results].count(True) == 1
    winner = next(r for r in results if r.succeeded)
    assert all(r.responses[0] is not None and r.responses[0].mod_revision == winner.revision
               for r in results if not r.succeeded)


async def test_concurrent_writers_get_distinct_contiguous_revisions(store: Store) -> None:
    results = await asyncio.gather(*(put(store, f"/k{i % 7}", str(i)) for i in range(100)))
    assert sorted(results) == list(range(1, 101))
    assert store.revision == 100


# -- bad input


@pytest.mark.parametrize(("args", "field"), [
    (([], [Put("/a", b"1"), Put("/a", b"2")]), "success[1].key"),
    (([], [Put("/a", b"1"), DeleteKey("/a")]), "success[1].key"),
    (([], [Put("/a", "text")]), "success[0].value"),  # type: ignore[arg-type]
    (([], [Put("", b"")]), "success[0].key"),
    (([Compare("/a", "version", "=", b"1")], []), "compares[0].value"),
    (([Compare("/a", "value", "=", 1)], []), "compares[0].value"),
    (([Compare("/a", "lease", "=", 1)], []), "compares[0].target"),  # type: ignore[arg-type]
    (([Compare("/a", "version", "~", 1)], []), "compares[0].result"),  # type: ignore[arg-type]
    (([], [], ["op"]), "failure[0]"),
])
async def test_malformed_txn_is_a_value_error_naming_the_field(store: Store, args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(field) + ": "):
        await store.txn(*args)
    assert store.revision == 0


# -- range


async def _fill(store: Store) -> None:
    await put(store, "/registry/pods/a/p1", "1")        # 1
    await put(store, "/registry/pods/a/p2", "2")        # 2
    await put(store, "/registry/pods/b/p1", "3")        # 3
    await put(store, "/registry/podsx/a/q", "4")        # 4: shares a string prefix with pods
    await put(store, "/registry/nodes/n1", "5")         # 5
    await put(store, "/registry/pods/a/p2", "2b")       # 6
    await store.txn([], [DeleteKey("/registry/pods/a/p1")])  # 7


async def test_range_by_prefix_is_sorted_and_counts(store: Store) -> None:
    await _fill(store)
    r = await store.range("/registry/pods/")
    assert [k.key for k in r.kvs] == ["/registry/pods/a/p2", "/registry/pods/b/p1"]
    assert (r.revision, r.more, r.count) == (7, False, 2)
    assert r.kvs[0] == kv("/registry/pods/a/p2", b"2b", 2, 6, 2)
    r = await store.range("/registry/pods")
    assert [k.key for k in r.kvs] == ["/registry/pods/a/p2", "/registry/pods/b/p1", "/registry/podsx/a/q"]
    assert (await store.range("")).count == 4
    assert (await store.range("/nothing/")) .kvs == ()


async def test_range_limit_and_start_key_page_through_with_count_of_the_rest(store: Store) -> None:
    for i in range(10):
        await put(store, f"/p/{i:02d}", str(i))
    await put(store, "/q/x", "other")
    seen: list[str] = []
    start = ""
    remaining = []
    while True:
        r = await store.range("/p/", limit=3, start_key=start)
        seen += [k.key for k in r.kvs]
        remaining.append(r.count - len(r.kvs))  # what kube-apiserver reports as remainingItemCount
        if not r.more:
            break
        start = r.kvs[-1].key + "\0"
    assert seen == [f"/p/{i:02d}" for i in range(10)]
    assert remaining == [7, 4, 1, 0]
    r = await store.range("/p/", limit=10)
    assert (len(r.kvs), r.more, r.count) == (10, False, 10)
    r = await store.range("/p/", start_key="/a")  # a start key before the prefix: the whole prefix
    assert r.count == 10
    r = await store.range("/p/", start_key="/z")  # after it: nothing
    assert (r.kvs, r.count, r.more) == ((), 0, False)


async def test_range_and_get_at_a_revision_see_the_state_then(store: Store) -> None:
    await _fill(store)
    r = await store.range("/registry/pods/", revision=2)
    assert [(k.key, k.value) for k in r.kvs] == [("/registry/pods/a/p1", b"1"), ("/registry/pods/a/p2", b"2")]
    assert (r.revision, r.count) == (2, 2)
    r = await store.range("/registry/pods/", revision=6)  # before the delete
    assert [(k.key, k.value, k.mod_revision) for k in r.kvs] == [
        ("/registry/pods/a/p1", b"1", 1), ("/registry/pods/a/p2", b"2b", 6), ("/registry/pods/b/p1", b"3", 3)]
    r = await store.range("/registry/pods/", revision=6, limit=1, start_key="/registry/pods/a/p2")
    assert [k.key for k in r.kvs] == ["/registry/pods/a/p2"] and (r.more, r.count) == (True, 2)
    assert (await store.get("/registry/pods/a/p1", revision=6)) == (kv("/registry/pods/a/p1", b"1", 1, 1, 1), 6)
    assert (await store.get("/registry/pods/a/p1", revision=7)) == (None, 7)
    assert (await store.get("/registry/pods/a/p2", revision=5))[0] == kv("/registry/pods/a/p2", b"2", 2, 2, 1)
    assert (await store.get("/registry/nodes/n1", revision=4)) == (None, 4)
    assert (await store.range("", revision=1)).count == 1


async def test_reads_at_a_future_revision_raise_future_revision(store: Store) -> None:
    await put(store, "/a", "1")
    with pytest.raises(FutureRevision) as e:
        await store.range("/", revision=2)
    assert (e.value.requested, e.value.current) == (2, 1)
    with pytest.raises(FutureRevision):
        await store.get("/a", revision=5)


# -- watch


async def test_watch_from_a_revision_replays_then_follows_in_order_with_prev_kv(store: Store) -> None:
    await _fill(store)
    w = store.watch("/registry/pods/", 2)
    events = await take(w, 3)
    assert [(e.type, e.kv.key, e.kv.mod_revision) for e in events] == [
        ("PUT", "/registry/pods/a/p2", 2), ("PUT", "/registry/pods/b/p1", 3),
        ("PUT", "/registry/pods/a/p2", 6)]
    assert events[0].prev_kv is None
    assert events[2].prev_kv == kv("/registry/pods/a/p2", b"2", 2, 2, 1)
    (deleted,) = await take(w, 1)
    assert deleted == Event("DELETE", KeyValue("/registry/pods/a/p1", b"", 0, 7, 0),
                            kv("/registry/pods/a/p1", b"1", 1, 1, 1))
    assert await nothing_more(w)  # cancelling a pending read keeps the watch
    await put(store, "/registry/nodes/n2", "x")  # not under the prefix
    await put(store, "/registry/pods/c/p", "new")
    (ev,) = await take(w, 1)
    assert (ev.type, ev.kv, ev.prev_kv) == ("PUT", kv("/registry/pods/c/p", b"new", 9, 9, 1), None)
    await w.aclose()  # type: ignore[attr-defined]
    with pytest.raises(StopAsyncIteration):
        await w.__anext__()


async def test_watch_from_zero_starts_after_now_and_from_the_future_waits(store: Store) -> None:
    await put(store, "/a", "1")
    now = store.watch("/", 0)
    later = store.watch("/", 4)
    await put(store, "/b", "2")
    await put(store, "/c", "3")
    await put(store, "/d", "4")
    assert [e.kv.key for e in await take(now, 3)] == ["/b", "/c", "/d"]
    assert [e.kv.key for e in await take(later, 1)] == ["/d"]


async def test_watch_yields_each_event_of_a_multi_key_txn_once(store: Store) -> None:
    w = store.watch("/", 1)
    await store.txn([], [Put("/x", b"1"), Put("/y", b"1"), Put("/z", b"1")])
    await store.txn([], [DeleteKey("/x"), Put("/y", b"2"), Get("/z")])
    events = await take(w, 5)
    assert [(e.type, e.kv.key, e.kv.mod_revision) for e in events] == [
        ("PUT", "/x", 1), ("PUT", "/y", 1), ("PUT", "/z", 1), ("DELETE", "/x", 2), ("PUT", "/y", 2)]
    assert await nothing_more(w)


async def test_many_watchers_each_see_every_event_once(store: Store) -> None:
    watchers = [store.watch("/w/" if i % 2 else "/", 1) for i in range(50)]
    writes = 60

    async def writer() -> None:
        for i in range(writes):
            await store.txn([], [Put(f"/w/{i % 5}", str(i).encode())])
            if i % 10 == 0:
                await store.txn([], [Put("/other", str(i).encode())])
            await asyncio.sleep(0)

    async def reader(w: AsyncIterator[Event], n: int) -> list[int]:
        return [e.kv.mod_revision for e in await take(w, n)]

    *seen, _ = await asyncio.gather(*(reader(w, writes if i % 2 else writes + 6) for i, w in enumerate(watchers)),
                                    writer())
    for i, revs in enumerate(seen):
        assert revs == sorted(set(revs)), f"watcher {i}: out of order or twice"
        assert len(revs) == (writes if i % 2 else writes + 6)
    for w in watchers:
        assert await nothing_more(w, 0.01)


async def test_a_slow_watcher_blocks_neither_writers_nor_other_watchers(store: Store, backend: Backend) -> None:
    slow = store.watch("/", 1)
    fast = store.watch("/", 1)
    n = 400
    got: list[int] = []

    async def follow() -> None:
        async for e in fast:
            got.append(e.kv.mod_revision)
            if len(got) == n:
                return

    follower = asyncio.ensure_future(follow())
    for i in range(n):  # the slow watcher reads nothing meanwhile
        await store.txn([], [Put(f"/k{i % 10}", str(i).encode())])
    await asyncio.wait_for(follower, 5)
    assert got == list(range(1, n + 1))
    if backend.durable:  # memory holds only the ring; the slow watcher's past is in the log
        assert len(store._mvcc.history) <= 2 * backend.history_size + 1  # type: ignore[attr-defined]
    events = await take(slow, n)  # it catches up, in order, each once
    assert [e.kv.mod_revision for e in events] == list(range(1, n + 1))
    if backend.durable and backend.history_size < n:
        assert store._older.reads >= n // 500  # type: ignore[attr-defined]  # from the log, in chunks
    assert events[-1].prev_kv is not None and events[-1].prev_kv.mod_revision == n - 10


async def test_a_watcher_passed_by_compaction_ends_with_compacted(store: Store) -> None:
    for i in range(10):
        await put(store, "/k", str(i))
    slow = store.watch("/", 1)
    assert len(await take(slow, 3)) == 3  # it is at revision 4
    await store.compact(6)
    with pytest.raises(Compacted) as e:
        await slow.__anext__()
    assert (e.value.requested, e.value.compacted) == (4, 6)
    ahead = store.watch("/", 7)  # just above the compacted revision: fine
    assert [x.kv.mod_revision for x in await take(ahead, 4)] == [7, 8, 9, 10]


async def test_close_ends_watches_and_refuses_calls(backend: Backend) -> None:
    store = await backend.open()
    await put(store, "/a", "1")
    w = store.watch("/", 0)
    pending = asyncio.ensure_future(w.__anext__())
    await asyncio.sleep(0.01)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await asyncio.wait_for(pending, 2)
    with pytest.raises(StoreError, match="closed"):
        await store.txn([], [Put("/b", b"")])
    with pytest.raises(StoreError, match="closed"):
        await store.get("/a")
    with pytest.raises(StoreError, match="closed"):
        store.watch("/", 0)


# -- compaction


async def test_compaction_forgets_old_revisions_and_keeps_history_above(store: Store) -> None:
    await _fill(store)
    await store.compact(5)
    assert store.compacted_revision == 5
    for call in (store.range("/", revision=4), store.get("/registry/pods/a/p1", revision=1)):
        with pytest.raises(Compacted) as e:
            await call
        assert e.value.compacted == 5
    with pytest.raises(Compacted):
        store.watch("/", 5)  # events of revision 5 are gone
    with pytest.raises(Compacted):
        store.watch("/", 3)
    r = await store.range("/registry/pods/", revision=5)  # the state at the compacted revision stays
    assert [(k.key, k.value) for k in r.kvs] == [
        ("/registry/pods/a/p1", b"1"), ("/registry/pods/a/p2", b"2"), ("/registry/pods/b/p1", b"3")]
    r = await store.range("/registry/pods/", revision=6)
    assert [k.value for k in r.kvs] == [b"1", b"2b", b"3"]
    events = await take(store.watch("/", 6), 2)
    assert [(e.type, e.kv.mod_revision) for e in events] == [("PUT", 6), ("DELETE", 7)]
    assert events[0].prev_kv == kv("/registry/pods/a/p2", b"2", 2, 2, 1)  # kept: it is the state at 5
    assert (await store.range("/")).count == 4


async def test_compact_rules(store: Store) -> None:
    await put(store, "/a", "1")
    await put(store, "/a", "2")
    with pytest.raises(FutureRevision):
        await store.compact(3)
    await store.compact(2)  # up to the current revision
    with pytest.raises(Compacted):
        await store.compact(2)
    with pytest.raises(Compacted):
        await store.compact(1)
    assert (await store.get("/a")) == (kv("/a", b"2", 1, 2, 2), 2)
    assert (await put(store, "/a", "3")) == 3


# -- durability (the SQLite backend)


async def test_reopen_brings_back_every_committed_key_and_the_counters(durable: Backend) -> None:
    store = await durable.open()
    await _fill(store)
    await store.txn([], [Put("/multi/1", b"a"), Put("/multi/2", b"b")])  # 8
    await store.compact(3)
    await store.txn([], [DeleteKey("/registry/nodes/n1")])  # 9: the newest revision is a deletion
    before = await store.range("")
    await store.close()

    store = await durable.open()
    try:
        assert (store.revision, store.compacted_revision) == (9, 3)
        assert await store.range("") == before
        r = await store.range("/registry/pods/", revision=6)
        assert [k.value for k in r.kvs] == [b"1", b"2b", b"3"]
        events = await take(store.watch("/", 4), 6)
        assert [(e.type, e.kv.key, e.kv.mod_revision) for e in events] == [
            ("PUT", "/registry/podsx/a/q", 4), ("PUT", "/registry/nodes/n1", 5), ("PUT", "/registry/pods/a/p2", 6),
            ("DELETE", "/registry/pods/a/p1", 7), ("PUT", "/multi/1", 8), ("PUT", "/multi/2", 8)]
        (deleted,) = await take(store.watch("/", 9), 1)
        assert deleted.prev_kv == kv("/registry/nodes/n1", b"5", 5, 5, 1)
        assert (await put(store, "/registry/nodes/n1", "again")) == 10  # the counter continues
        assert (await store.get("/registry/nodes/n1"))[0] == kv("/registry/nodes/n1", b"again", 10, 10, 1)
    finally:
        await store.close()


async def test_reopen_after_compacting_a_deletion_at_the_newest_revision(durable: Backend) -> None:
    store = await durable.open()
    await put(store, "/a", "1")
    await store.txn([], [DeleteKey("/a")])
    await store.compact(2)  # removes both rows: the log has none left
    await store.close()
    store = await durable.open()
    try:
        assert (store.revision, store.compacted_revision) == (2, 2)
        assert (await store.range("")).count == 0
        assert (await put(store, "/a", "again")) == 3
    finally:
        await store.close()


async def test_old_reads_of_the_small_ring_come_from_the_log(tmp_path: Path) -> None:
    store = await make_backend("sqlite-ring2", tmp_path).open()
    try:
        await _fill(store)
        before = store._older.reads  # type: ignore[attr-defined]
        assert (await store.range("/registry/pods/", revision=2)).count == 2
        assert (await store.get("/registry/pods/a/p1", revision=1))[0] is not None
        assert len(await take(store.watch("/", 1), 7)) == 7
        assert store._older.reads == before + 3  # type: ignore[attr-defined]
        assert (await store.range("/registry/pods/", revision=6)).count == 3  # in the ring
        assert store._older.reads == before + 3  # type: ignore[attr-defined]
    finally:
        await store.close()
