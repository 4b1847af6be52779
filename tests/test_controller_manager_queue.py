"""The controller-manager's work queue, rate limiters, expectations and informer cache, driven by a
fake clock: dedup, one worker per key, dirty re-queue, delays, per-key exponential back-off from
5 ms to 1000 s (client-go's DefaultControllerRateLimiter), the token bucket, expectations that
hold a controller back until its writes are observed."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.cluster.controllers.common.expectations import Expectations
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.queue import (
    BucketRateLimiter,
    DefaultControllerRateLimiter,
    ExponentialFailureRateLimiter,
    WorkQueue,
)
from nodeagent.core.clock import FakeClock


def test_dedup_and_fifo() -> None:
    q = WorkQueue(FakeClock())
    for k in ("a", "b", "a", "c", "b"):
        q.add(k)
    assert len(q) == 3
    assert [q.poll(), q.poll(), q.poll(), q.poll()] == ["a", "b", "c", None]


def test_a_key_is_never_with_two_workers_and_comes_back_when_dirty() -> None:
    q = WorkQueue(FakeClock())
    q.add("a")
    assert q.poll() == "a"
    q.add("a")  # changed while being processed: dirty, not handed out again
    assert q.poll() is None and q.processing == {"a"}
    q.add("a")  # and still once
    q.done("a")
    assert q.poll() == "a" and q.poll() is None
    q.done("a")
    assert q.poll() is None and not q.processing


def test_add_after_waits_for_the_clock_and_the_earliest_time_wins() -> None:
    clock = FakeClock()
    q = WorkQueue(clock)
    q.add_after("a", 10)
    q.add_after("a", 3)
    q.add_after("a", 7)
    assert q.poll() is None and q.next_due() == clock.now() + 3
    clock.advance(2.9)
    assert q.poll() is None
    clock.advance(0.1)
    assert q.poll() == "a"
    q.done("a")
    clock.advance(10)
    assert q.poll() is None  # the later times were superseded, not queued again
    q.add_after("b", 0)
    assert q.poll() == "b"


@pytest.mark.parametrize(("failures", "delay"), [
    (0, 0.005), (1, 0.01), (2, 0.02), (3, 0.04), (10, 5.12), (17, 655.36), (18, 1000.0), (30, 1000.0), (100, 1000.0),
])
def test_exponential_back_off_5ms_doubling_to_1000s(failures: int, delay: float) -> None:
    rl = ExponentialFailureRateLimiter()
    for _ in range(failures):
        rl.when("k", 0)
    assert rl.when("k", 0) == pytest.approx(delay)
    assert rl.num_requeues("k") == failures + 1
    assert rl.when("other", 0) == 0.005  # per key
    rl.forget("k")
    assert rl.num_requeues("k") == 0 and rl.when("k", 0) == 0.005


def test_token_bucket_10qps_burst_100() -> None:
    rl = BucketRateLimiter()
    assert all(rl.when(i, 0.0) == 0.0 for i in range(100))
    assert rl.when("x", 0.0) == pytest.approx(0.1)
    assert rl.when("y", 0.0) == pytest.approx(0.2)
    assert rl.when("z", 0.25) == pytest.approx(0.05)  # 2.5 tokens back after 250 ms, 2 owed: half a token short
    assert rl.when("w", 10.0) == 0.0  # refilled (to the burst, no more)


def test_default_rate_limiter_is_the_max_of_both_and_the_queue_backs_off() -> None:
    clock = FakeClock()
    q = WorkQueue(clock, DefaultControllerRateLimiter())
    delays = []
    for _ in range(5):
        q.add_rate_limited("k")
        due = q.next_due()
        assert due is not None
        delays.append(round(due - clock.now(), 6))
        clock.advance(due - clock.now())
        assert q.poll() == "k"
        q.done("k")
    assert delays == [0.005, 0.01, 0.02, 0.04, 0.08]
    q.forget("k")
    q.add_rate_limited("k")
    assert q.next_due() == pytest.approx(clock.now() + 0.005)


async def test_get_sleeps_until_a_delayed_key_is_due_and_shutdown_wakes_workers() -> None:
    q = WorkQueue(FakeClock())  # a fake clock never moves: the wait is on the real loop only
    q.add_after("late", 0.01)
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0.05)
    assert not getter.done()  # the fake clock says it is not due yet
    q.add("now")
    assert await asyncio.wait_for(getter, 1) == "now"
    waiting = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    assert await asyncio.wait_for(waiting, 1) is None


def test_expectations_hold_until_observed_or_expired() -> None:
    e, now = Expectations(), 100.0
    assert e.satisfied("ns/rs", now)
    e.expect_creations("ns/rs", 2, now)
    assert not e.satisfied("ns/rs", now)
    e.creation_observed("ns/rs")
    assert not e.satisfied("ns/rs", now) and e.pending("ns/rs") == (1, 0)
    e.creation_observed("ns/rs")
    assert e.satisfied("ns/rs", now)
    e.expect_deletions("ns/rs", ["ns/p1", "ns/p2"], now)
    e.deletion_observed("ns/rs", "ns/p1")
    e.deletion_observed("ns/rs", "ns/p1")  # seen terminating, then gone: counted once
    assert not e.satisfied("ns/rs", now)
    assert e.satisfied("ns/rs", now + 301)  # ExpectationsTimeout: five minutes
    e.deletion_observed("ns/rs", "ns/p2")
    assert e.satisfied("ns/rs", now)


def _pod(name: str, rv: str, owner: str | None = None, ns: str = "a") -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "namespace": ns, "uid": f"u-{name}", "resourceVersion": rv}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"u-{owner}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def test_informer_cache_indexes_and_handlers() -> None:
    inf = Informer("v1", "Pod")
    seen: list[tuple[str, str]] = []
    inf.add_handlers(Handlers(lambda o: seen.append(("add", o["metadata"]["name"])),
                              lambda old, new: seen.append(("update", new["metadata"]["resourceVersion"])),
                              lambda o: seen.append(("delete", o["metadata"]["name"]))))
    inf.apply("ADDED", _pod("p1", "1", owner="rs"))
    inf.apply("ADDED", _pod("p2", "2", ns="b"))
    inf.apply("MODIFIED", _pod("p1", "3"))  # released by its ReplicaSet
    inf.apply("BOOKMARK", _pod("p1", "4"))
    assert seen == [("add", "p1"), ("add", "p2"), ("update", "3")]
    assert inf.controlled_by("u-rs") == [] and [p["metadata"]["name"] for p in inf.in_namespace("a")] == ["p1"]
    inf.apply("MODIFIED", _pod("p1", "5", owner="rs"))
    assert [p["metadata"]["name"] for p in inf.controlled_by("u-rs")] == ["p1"]
    inf.apply("DELETED", _pod("p1", "6", owner="rs"))
    assert inf.get("a/p1") is None and inf.controlled_by("u-rs") == [] and inf.in_namespace("a") == []
    assert seen[-1] == ("delete", "p1") and len(inf) == 1


def test_informer_node_index_follows_binding_moves_and_deletes() -> None:
    inf = Informer("v1", "Pod")

    def bound(name: str, rv: str, node: str | None) -> dict[str, object]:
        p = _pod(name, rv)
        p["spec"] = {"nodeName": node} if node is not None else {}
        return p

    def on(node: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in inf.on_node(node))  # type: ignore[index]

    inf.apply("ADDED", bound("p1", "1", None))
    inf.apply("ADDED", bound("p2", "2", "n1"))
    assert on("n1") == ["p2"] and on("") == [] and on("n2") == []
    inf.apply("MODIFIED", bound("p1", "3", "n1"))  # the binding
    assert on("n1") == ["p1", "p2"]
    inf.apply("MODIFIED", bound("p2", "4", "n2"))  # (a node never changes upstream; the index follows anyway)
    assert on("n1") == ["p1"] and on("n2") == ["p2"]
    inf.apply("DELETED", bound("p1", "5", "n1"))
    assert on("n1") == [] and on("n2") == ["p2"]
    inf.apply("MODIFIED", {**bound("p2", "6", None), "spec": "not an object"})
    assert on("n2") == [] and len(inf) == 1
    for node, names in (("n1", []), ("n2", [])):
        assert on(node) == names
    assert inf._by_node == {}
