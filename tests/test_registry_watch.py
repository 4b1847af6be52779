"""Watch semantics: resume, initial state, WatchList's bookmark, selector transitions, 410, fan-out."""

from __future__ import annotations

import asyncio

import pytest
from kube.fixtures import make_registry, pod

from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.watch import Subscription
from nodeagent.core.selectors import parse_field_selector, parse_label_selector


async def _drain(sub: Subscription, n: int) -> list[tuple[str, str, str]]:
    out = []
    for _ in range(n):
        item = await sub.next(2.0)
        assert item is not None, f"expected {n} events, got {out}"
        out.append((item.type, item.object["metadata"]["name"], item.object["metadata"]["resourceVersion"]))
    return out


async def _quiet(sub: Subscription) -> bool:
    return await sub.next(0.05) is None


async def test_resume_after_a_resource_version_sends_only_later_changes() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    a = await pods.create("default", pod("a"), Context())
    b = await pods.create("default", pod("b"), Context())
    start = await pods.watch("default", ListOptions(watch=True, resource_version=a["metadata"]["resourceVersion"]))
    assert start.initial == []
    b["metadata"]["labels"] = {"x": "1"}
    await pods.update("default", "b", b, Context())
    await pods.delete("default", "a", DeleteOptions(), Context())
    events = await _drain(start.subscription, 3)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]
    assert int(events[2][2]) == store.revision  # DELETED carries the deletion's revision
    assert await _quiet(start.subscription)


async def test_unset_resource_version_sends_the_current_state_first() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    await pods.create("default", pod("a"), Context())
    start = await pods.watch("default", ListOptions(watch=True))
    assert [(i.type, i.object["metadata"]["name"]) for i in start.initial] == [("ADDED", "a")]
    assert start.initial_end is None
    await pods.create("default", pod("b"), Context())
    assert [(t, n) for t, n, _ in await _drain(start.subscription, 1)] == [("ADDED", "b")]


async def test_watch_list_ends_the_initial_state_with_a_bookmark_revision() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    await pods.create("default", pod("web"), Context())
    await pods.create("default", pod("other"), Context())
    start = await pods.watch("default", ListOptions(
        watch=True, send_initial_events=True, resource_version_match="NotOlderThan", allow_bookmarks=True,
        field=parse_field_selector("metadata.name=web")))
    assert [i.object["metadata"]["name"] for i in start.initial] == ["web"]
    assert start.initial_end == store.revision
    await pods.delete("default", "web", DeleteOptions(), Context())  # what `kubectl delete --wait` waits for
    assert [(t, n) for t, n, _ in await _drain(start.subscription, 1)] == [("DELETED", "web")]


async def test_objects_leaving_and_entering_a_selection() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    obj = await pods.create("default", pod("p", labels={"app": "web"}), Context())
    start = await pods.watch("default", ListOptions(watch=True, resource_version=obj["metadata"]["resourceVersion"],
                                                    label=parse_label_selector("app=web")))
    obj["metadata"]["labels"] = {"app": "db"}
    obj, _ = await pods.update("default", "p", obj, Context())
    obj["metadata"]["labels"] = {"app": "web"}
    obj, _ = await pods.update("default", "p", obj, Context())
    events = await _drain(start.subscription, 2)
    assert [t for t, *_ in events] == ["DELETED", "ADDED"]
    assert events[0][2] == str(int(obj["metadata"]["resourceVersion"]) - 1)  # the leaving revision


async def test_field_selected_watch_of_unbound_pods() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    start = await pods.watch(None, ListOptions(watch=True, resource_version=str(store.revision),
                                               field=parse_field_selector("spec.nodeName=")))
    await pods.create("default", pod("unbound"), Context())
    await pods.create("default", pod("bound", nodeName="n1"), Context())
    assert [(t, n) for t, n, _ in await _drain(start.subscription, 1)] == [("ADDED", "unbound")]
    assert await _quiet(start.subscription)


async def test_namespace_scoped_watch_sees_only_its_namespace() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    start = await pods.watch("kube-system", ListOptions(watch=True, resource_version=str(store.revision)))
    await pods.create("default", pod("elsewhere"), Context())
    await pods.create("kube-system", pod("here"), Context())
    assert [n for _, n, _ in await _drain(start.subscription, 1)] == ["here"]


async def test_compacted_resource_version_is_410_expired() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    old = str(store.revision)
    await pods.create("default", pod("a"), Context())
    await store.compact(store.revision)
    with pytest.raises(StatusError) as e:
        await pods.watch("default", ListOptions(watch=True, resource_version=old))
    assert e.value.code == 410 and e.value.reason == "Expired"
    assert e.value.message == f"too old resource version: {old} ({store.revision})"


async def test_future_resource_version_is_504() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    with pytest.raises(StatusError) as e:
        await pods.watch("default", ListOptions(watch=True, resource_version=str(store.revision + 10)))
    assert e.value.code == 504


async def test_one_change_is_decoded_and_encoded_once_for_all_watchers() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    rv = str(store.revision)
    subs = [(await pods.watch(None, ListOptions(watch=True, resource_version=rv))).subscription for _ in range(5)]
    await pods.create("default", pod("a"), Context())
    items = [await s.next(2.0) for s in subs]
    assert all(i is not None for i in items)
    changes = {id(i.change) for i in items if i is not None}
    objects = {id(i.object) for i in items if i is not None}
    assert len(changes) == 1 and len(objects) == 1  # one decode shared by every watcher


async def test_changes_past_the_hot_end_of_the_ring_drop_their_objects_and_decode_again_for_a_resume() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    pods.hub.hot = 2
    start = str(store.revision)
    live = await pods.watch("default", ListOptions(watch=True, resource_version=start))  # starts the hub
    for i in range(5):
        await pods.create("default", pod(f"p{i}"), Context())
    given = await _drain(live.subscription, 5)  # the live watcher got every object before they were dropped
    ring = list(pods.hub.ring)
    assert [c.encoded == {} and c._new is None for c in ring] == [True, True, True, False, False]
    resumed = await pods.watch("default", ListOptions(watch=True, resource_version=start))
    assert await _drain(resumed.subscription, 5) == given  # the same events, made again from the bytes
    assert [(await pods.get("default", f"p{i}"))["metadata"]["uid"] for i in range(5)] == \
        [c.new["metadata"]["uid"] for c in ring if c.new is not None]


async def test_resume_from_before_the_hub_started_uses_its_own_store_watch() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    early = str(store.revision)
    await pods.create("default", pod("a"), Context())
    live = await pods.watch("default", ListOptions(watch=True, resource_version=str(store.revision)))  # starts the hub
    await pods.create("default", pod("b"), Context())
    old = await pods.watch("default", ListOptions(watch=True, resource_version=early))
    assert [n for _, n, _ in await _drain(old.subscription, 2)] == ["a", "b"]
    assert [n for _, n, _ in await _drain(live.subscription, 1)] == ["b"]


async def test_a_slow_watcher_is_closed_not_buffered_forever() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    pods.hub.max_queue = 3
    start = await pods.watch("default", ListOptions(watch=True, resource_version=str(store.revision)))
    for i in range(6):
        await pods.create("default", pod(f"p{i}"), Context())
    await asyncio.sleep(0.05)
    assert start.subscription.closed
    seen = 0
    with pytest.raises(StopAsyncIteration):
        while True:
            if await start.subscription.next(1.0) is not None:
                seen += 1
    assert seen == 3


async def test_bookmark_revision_follows_the_resource() -> None:
    reg, store, _ = await make_registry()
    pods = reg.resource("", "v1", "pods")
    start = await pods.watch("default", ListOptions(watch=True, resource_version=str(store.revision),
                                                    label=parse_label_selector("app=none")))
    await pods.create("default", pod("a"), Context())
    await asyncio.sleep(0.05)
    assert start.subscription.bookmark_revision() == store.revision  # nothing for it, but it is up to date

