"""The scheduler on the registry (cluster/scheduling) and pods/binding, in process: a registry over
the MemoryStore, the real Feeds, the real loop; bindings, events and deletions through the registry."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.controlplane import Feed
from nodeagent.cluster.events.correlator import Correlator
from nodeagent.cluster.events.recorder import EventRecorder
from nodeagent.cluster.registry.binding import bind
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.scheduling.cache import SchedulerCache
from nodeagent.cluster.scheduling.scheduler import Scheduler
from nodeagent.core.clock import FakeClock
from nodeagent.core.selectors import parse_field_selector

CTX = Context(field_manager="test")


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": name[-1]}},
            "spec": spec, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                                     "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
                                     "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, cpu: str = "100m", priority: int | None = None, grace: int = 30) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "command": ["sleep", "1"],
                                            "resources": {"requests": {"cpu": cpu}}}],
                            "terminationGracePeriodSeconds": grace}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class Harness:
    def __init__(self, reg: Registry, clock: FakeClock) -> None:
        self.reg, self.clock = reg, clock
        self.pods = reg.resource("", "v1", "pods")
        self.nodes = reg.resource("", "v1", "nodes")
        self.events = reg.resource("", "v1", "events")
        self.tasks: list[asyncio.Task[None]] = []
        self.sched: Scheduler | None = None
        self.recorder: EventRecorder | None = None

    async def start(self) -> Scheduler:
        self.recorder = EventRecorder(self.events, self.clock, "default-scheduler", correlator=Correlator())
        cache = SchedulerCache()
        self.sched = Scheduler(self.pods, cache, self.recorder, self.clock)
        self.tasks = [asyncio.create_task(self.recorder.run())]
        for gs, apply in ((self.nodes, cache.apply_node), (self.pods, cache.apply_pod)):
            feed = Feed(gs, apply)
            await feed.relist()
            self.tasks.append(asyncio.create_task(feed.run()))
        self.tasks.append(asyncio.create_task(self.sched.run()))
        return self.sched

    async def stop(self) -> None:
        if self.sched is not None:
            await self.sched.close()
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def until(self, check: Any, timeout: float = 5.0) -> None:
        """Run the loop (advancing the fake clock past backoffs) until `check()` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await check():
            assert loop.time() < deadline, "condition not reached"
            await asyncio.sleep(0.01)
            self.clock.advance(0.5)
            if self.sched is not None:
                self.sched.cluster_changed()

    async def pod(self, name: str, ns: str = "default") -> dict[str, Any]:
        return await self.pods.get(ns, name)

    async def events_of(self, name: str, ns: str = "default") -> list[dict[str, Any]]:
        assert self.recorder is not None
        await self.recorder.flush()
        opts = ListOptions(field=parse_field_selector(f"involvedObject.name={name},involvedObject.namespace={ns}"))
        return (await self.events.list(ns, opts)).items


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    reg, _store, clock = await make_registry()
    harness = Harness(reg, clock)
    yield harness
    await harness.stop()
    await reg.close()


async def test_binding_sets_the_node_once_and_refuses_a_second_binder(h: Harness) -> None:
    await h.nodes.create(None, node("n1"), CTX)
    created = await h.pods.create("default", pod("p"), CTX)
    target = {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    bound = await bind(h.pods, "default", "p", target, CTX)
    assert bound["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    with pytest.raises(StatusError) as e:
        await bind(h.pods, "default", "p", {**target, "target": {"name": "n2"}}, CTX)
    assert e.value.code == 409 and e.value.status["message"] == \
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    assert (await h.pod("p"))["spec"]["nodeName"] == "n1"
    await h.pods.create("default", pod("q"), CTX)
    with pytest.raises(StatusError) as e:
        await bind(h.pods, "default", "q", {"target": {"kind": "Node"}}, CTX)
    assert e.value.code == 422 and e.value.status["details"]["causes"][0]["field"] == "target.name"
    with pytest.raises(StatusError) as e:
        await bind(h.pods, "default", "q", {"metadata": {"uid": "other"}, "target": {"name": "n1"}}, CTX)
    assert e.value.code == 409 and "Precondition failed: UID" in e.value.status["message"]
    with pytest.raises(StatusError) as e:
        await bind(h.pods, "default", "gone", {"target": {"name": "n1"}}, CTX)
    assert e.value.code == 404
    assert created["metadata"]["uid"]


async def test_binding_leaves_managed_fields_and_the_stored_parts_it_does_not_change(h: Harness) -> None:
    """As upstream's BindingREST (a storage-level GuaranteedUpdate): no managedFields entry for
    the binder; spec.nodeName, PodScheduled=True and the Binding's annotations, the rest as stored."""
    created = await h.pods.create("default", {**pod("p"), "metadata": {"name": "p", "annotations": {"a": "1"}}}, CTX)
    before = await h.pod("p")
    target = {"metadata": {"name": "p", "annotations": {"b": "2"}}, "target": {"kind": "Node", "name": "n1"}}
    bound = await bind(h.pods, "default", "p", target, Context(field_manager="default-scheduler"))
    after = await h.pod("p")
    assert after == bound
    assert after["metadata"]["managedFields"] == before["metadata"]["managedFields"] == created["metadata"]["managedFields"]
    assert after["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert after["spec"] == {**before["spec"], "nodeName": "n1"}
    assert [(c["type"], c["status"]) for c in after["status"]["conditions"]] == [("PodScheduled", "True")]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    unchanged = ("uid", "creationTimestamp", "generation", "name", "namespace")
    assert {k: after["metadata"].get(k) for k in unchanged} == {k: before["metadata"].get(k) for k in unchanged}
    assert {k: v for k, v in after["status"].items() if k != "conditions"} == \
        {k: v for k, v in before["status"].items() if k != "conditions"}


async def test_two_binders_racing_bind_exactly_once(h: Harness) -> None:
    await h.pods.create("default", pod("p"), CTX)
    results = await asyncio.gather(*(bind(h.pods, "default", "p", {"target": {"name": f"n{i}"}}, CTX)
                                     for i in range(8)), return_exceptions=True)
    won = [r for r in results if isinstance(r, dict)]
    assert len(won) == 1 and all(isinstance(r, StatusError) and r.code == 409 for r in results if r not in won)
    assert (await h.pod("p"))["spec"]["nodeName"] == won[0]["spec"]["nodeName"]


async def test_pending_pods_are_bound_spread_and_get_scheduled_events(h: Harness) -> None:
    for n in ("n1", "n2"):
        await h.nodes.create(None, node(n, cpu="1"), CTX)
    await h.start()
    for i in range(6):
        await h.pods.create("default", pod(f"p{i}", cpu="300m"), CTX)

    async def bound() -> bool:
        return all([(await h.pod(f"p{i}"))["spec"].get("nodeName") for i in range(6)])

    await h.until(bound)
    nodes = [(await h.pod(f"p{i}"))["spec"]["nodeName"] for i in range(6)]
    assert sorted(nodes) == ["n1"] * 3 + ["n2"] * 3  # LeastAllocated spreads; 3 x 300m fit in 1 cpu
    events = await h.events_of("p0")
    assert [(e["type"], e["reason"], e["count"]) for e in events] == [("Normal", "Scheduled", 1)]
    assert events[0]["message"] == f"Successfully assigned default/p0 to {nodes[0]}"
    assert events[0]["source"] == {"component": "default-scheduler"}
    assert events[0]["involvedObject"]["uid"] == (await h.pod("p0"))["metadata"]["uid"]


async def test_nothing_fits_gives_unschedulable_and_one_deduplicated_failed_scheduling_event(h: Harness) -> None:
    await h.nodes.create(None, node("n1", cpu="1"), CTX)
    await h.start()
    await h.pods.create("default", pod("big", cpu="2"), CTX)

    async def counted() -> bool:
        ev = await h.events_of("big")
        return bool(ev) and ev[0]["count"] >= 3

    await h.until(counted)
    events = await h.events_of("big")
    assert len(events) == 1 and events[0]["reason"] == "FailedScheduling" and events[0]["type"] == "Warning"
    assert events[0]["message"] == "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are " \
                                   "available: 1 No preemption victims found for incoming pod."
    assert events[0]["firstTimestamp"] <= events[0]["lastTimestamp"]
    cond = (await h.pod("big"))["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in cond] == [("PodScheduled", "False", "Unschedulable")]
    # room appears: a node is added and the pod goes there
    await h.nodes.create(None, node("n2", cpu="4"), CTX)

    async def bound() -> bool:
        return (await h.pod("big"))["spec"].get("nodeName") == "n2"

    await h.until(bound)


async def test_an_unschedulable_pod_waits_for_a_cluster_event_not_for_its_backoff(h: Harness) -> None:
    await h.nodes.create(None, node("n1", cpu="1"), CTX)
    sched = await h.start()
    await h.pods.create("default", pod("big", cpu="2"), CTX)

    async def attempts() -> int:
        ev = await h.events_of("big")
        return int(ev[0]["count"]) if ev else 0

    async def settled(want: int) -> None:
        for _ in range(500):
            if await attempts() == want and sched.queue.counts()["unschedulable"] == 1:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {want} attempts, saw {await attempts()}")

    await settled(1)
    rv = (await h.pod("big"))["metadata"]["resourceVersion"]
    h.clock.advance(60)  # far past its backoff: without an event it is not tried again
    sched._wake.set()
    await asyncio.sleep(0.1)
    assert await attempts() == 1
    await h.pods.create("default", pod("small"), CTX)  # a pod bound to a node is an event: it is tried again
    await settled(2)
    assert (await h.pod("big"))["metadata"]["resourceVersion"] == rv  # PodScheduled=False unchanged: not written


async def test_preemption_deletes_lower_priority_victims_through_the_api_and_binds_the_preemptor(h: Harness) -> None:
    await h.nodes.create(None, node("n1", cpu="1"), CTX)
    await h.start()
    for i in range(2):
        await h.pods.create("default", pod(f"low{i}", cpu="500m", priority=1, grace=0), CTX)

    async def low_bound() -> bool:
        return all([(await h.pod(f"low{i}"))["spec"].get("nodeName") for i in range(2)])

    await h.until(low_bound)
    high = await h.pods.create("default", pod("high", cpu="500m", priority=100), CTX)

    async def high_bound() -> bool:
        return (await h.pod("high"))["spec"].get("nodeName") == "n1"

    await h.until(high_bound)
    left = [p["metadata"]["name"] for p in (await h.pods.list("default", ListOptions())).items]
    assert sorted(left) == ["high", "low0"]  # the later-started one went (MoreImportantPod keeps the earlier)
    preempted = await h.events_of("low1")
    assert [e["reason"] for e in preempted] == ["Scheduled", "Preempted"]
    assert preempted[1]["message"] == f"Preempted by pod {high['metadata']['uid']} on node n1"
    reasons = [e["reason"] for e in await h.events_of("high")]
    assert reasons == ["FailedScheduling", "Scheduled"]


async def test_a_victim_with_grace_stays_terminating_and_the_preemptor_waits_nominated(h: Harness) -> None:
    await h.nodes.create(None, node("n1", cpu="1"), CTX)
    await h.start()
    await h.pods.create("default", pod("low", cpu="1", priority=1, grace=30), CTX)

    async def low_bound() -> bool:
        return bool((await h.pod("low"))["spec"].get("nodeName"))

    await h.until(low_bound)
    await h.pods.create("default", pod("high", cpu="1", priority=100), CTX)

    async def nominated() -> bool:
        return (await h.pod("high"))["status"].get("nominatedNodeName") == "n1" and \
            bool((await h.pod("low"))["metadata"].get("deletionTimestamp"))

    await h.until(nominated)
    low = await h.pod("low")
    assert low["metadata"]["deletionGracePeriodSeconds"] == 30
    assert any(c["type"] == "DisruptionTarget" and c["reason"] == "PreemptionByScheduler"
               for c in low["status"]["conditions"])
    for _ in range(20):  # the victim is still there: no second preemption, no binding
        h.clock.advance(1)
        assert h.sched is not None
        h.sched.cluster_changed()
        await asyncio.sleep(0.01)
    assert not (await h.pod("high"))["spec"].get("nodeName")
    assert h.sched.counters["preemptions"] == 1
    # the node's agent finishes the deletion (grace 0): the preemptor takes the room
    await h.pods.delete("default", "low", DeleteOptions(grace_period_seconds=0), CTX)

    async def high_bound() -> bool:
        return (await h.pod("high"))["spec"].get("nodeName") == "n1"

    await h.until(high_bound)


async def test_a_restart_in_the_middle_converges_without_double_binding_or_overcommit(h: Harness) -> None:
    for n in ("n1", "n2", "n3"):
        await h.nodes.create(None, node(n, pods="20"), CTX)
    for i in range(60):
        await h.pods.create("default", pod(f"p{i:02d}", cpu="10m"), CTX)
    sched = await h.start()

    async def some_bound() -> bool:
        return sched.counters["bound"] >= 10

    await h.until(some_bound)
    await h.stop()  # bindings in flight are cancelled at any point
    second = await h.start()

    async def all_bound() -> bool:
        items = (await h.pods.list("default", ListOptions())).items
        return all(p["spec"].get("nodeName") for p in items)

    await h.until(all_bound)
    items = (await h.pods.list("default", ListOptions())).items
    per_node: dict[str, int] = {}
    for p in items:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert per_node == {"n1": 20, "n2": 20, "n3": 20}  # exactly full: nothing counted twice or lost
    assert sched.counters["bound"] + second.counters["bound"] <= 60  # a binding cancelled after its commit is not counted


def test_correlator_dedupes_and_spam_filters() -> None:
    c = Correlator(burst=3, refill=300.0)
    ev = {"metadata": {"name": "p.1", "namespace": "default"}, "involvedObject": {"kind": "Pod", "name": "p"},
          "reason": "FailedScheduling", "message": "m", "type": "Warning", "source": {"component": "s"}}
    first = c.observe(ev, 0.0, 1000.0)
    assert first is not None and first["count"] == 1 and first["metadata"]["name"] == "p.1"
    second = c.observe({**ev, "metadata": {"name": "p.2", "namespace": "default"}}, 1.0, 1001.0)
    assert second is not None and second["count"] == 2 and second["metadata"]["name"] == "p.1"
    assert second["firstTimestamp"] == first["firstTimestamp"] != second["lastTimestamp"]
    other = c.observe({**ev, "message": "other", "metadata": {"name": "p.3"}}, 2.0, 1002.0)
    assert other is not None and other["count"] == 1 and other["metadata"]["name"] == "p.3"
    assert c.observe(ev, 3.0, 1003.0) is None  # 3 of burst spent on this object
    assert c.observe(ev, 303.0, 1303.0) is not None  # one token back after 5 minutes
