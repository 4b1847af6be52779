"""The control plane's shared feeds: one list+watch per resource for every in-process index, whose
objects leave out managedFields while the API keeps serving them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.controlplane import Feeds
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.daemonkit.tasks import GuardedTasks

CTX = Context(field_manager="test")
Seen = list[tuple[str, dict[str, Any]]]


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
async def reg() -> AsyncIterator[Registry]:
    registry, _store, _clock = await make_registry()
    yield registry
    await registry.close()


async def settle(seen: Seen, n: int) -> None:
    for _ in range(200):
        if len(seen) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(seen)} events, expected {n}")


async def test_one_feed_per_resource_serves_every_index_without_managed_fields(reg: Registry) -> None:
    pods = reg.resource("", "v1", "pods")
    await pods.create("default", pod("before"), CTX)
    tasks = GuardedTasks("test")
    feeds = Feeds(tasks)
    first: Seen = []
    second: Seen = []
    try:
        await feeds.follow(pods, lambda t, o: first.append((t, o)))
        assert [(t, o["metadata"]["name"]) for t, o in first] == [("ADDED", "before")]
        await feeds.follow(pods, lambda t, o: second.append((t, o)))  # joins: told what is known, as ADDED
        assert len(feeds.feeds) == 1 and len(tasks) == 1
        assert second == first

        live = await pods.create("default", pod("after"), CTX)
        assert live["metadata"]["managedFields"]
        await settle(second, 2)
        await settle(first, 2)
        assert [(t, o["metadata"]["name"]) for t, o in second] == [("ADDED", "before"), ("ADDED", "after")]
        assert first[1][1] is second[1][1]  # one object for both indexes
        for _, obj in first:
            assert "managedFields" not in obj["metadata"]
            assert obj["metadata"]["labels"] == {"app": "a"} and obj["spec"]["containers"][0]["image"] == "i"

        # the API still serves them: a GET, a list and an HTTP watcher's event
        assert (await pods.get("default", "after"))["metadata"]["managedFields"] == live["metadata"]["managedFields"]
        listed = await pods.list("default", ListOptions())
        assert all(o["metadata"].get("managedFields") for o in listed.items)
        start = await pods.watch("default", ListOptions(watch=True, resource_version=live["metadata"]["resourceVersion"]))
        await pods.delete("default", "after", DeleteOptions(grace_period_seconds=0), CTX)
        item = await start.subscription.next(None)
        assert item is not None and item.type == "DELETED" and item.object["metadata"]["managedFields"]
        await settle(first, 3)
        assert first[2][0] == "DELETED" and "managedFields" not in first[2][1]["metadata"]
    finally:
        with contextlib.suppress(Exception):
            await tasks.close()

