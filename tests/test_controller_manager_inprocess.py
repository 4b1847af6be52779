"""The controller-manager over a real in-process registry (memory store, fake clock), with its
informers fed by hand so the cache can be made stale on purpose: expectations keep a ReplicaSet
from creating again while its own creates are unobserved, a fresh manager over the same store
(a restart: caches rebuilt by listing) creates nothing, and the executor reports what failed."""

from __future__ import annotations

from typing import Any

from kube.fixtures import served_registry  # noqa: F401 - the registry fixture

from nodeagent.cluster.controllers.common.actions import Create, Delete, ObjectRef, Patch, Plan, SlowStart
from nodeagent.cluster.controllers.manager.client import ApiError
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.clock import FakeClock

TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx", "command": ["sleep", "3600"]}]}}


async def stored_pods(reg: Registry) -> list[dict[str, Any]]:
    return (await reg.resource("", "v1", "pods").list("default", ListOptions())).items


async def feed_all(reg: Registry, mgr: ControllerManager) -> None:
    """What the control plane's Feed does on start: list each resource into its informer."""
    for (api_version, kind), inf in mgr.informers.items():
        gs = RegistryClient(reg).store(api_version, kind)
        for obj in (await gs.list(None, ListOptions())).items:
            inf.apply("ADDED", obj)


async def test_expectations_hold_a_second_burst_until_the_creates_are_observed(
        registry: tuple[Registry, FakeClock]) -> None:
    reg, clock = registry
    client = RegistryClient(reg)
    mgr = ControllerManager(client, clock, enabled=["replicaset"])
    rs = await client.resource("apps/v1", "ReplicaSet").create("default", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}})
    mgr.informer("apps/v1", "ReplicaSet").apply("ADDED", rs)
    rsc = mgr.replicaset

    async def sync() -> None:
        """One sync, then the ReplicaSet's own status write fed back (pods stay as fed by hand)."""
        assert await rsc.sync("default/web") is None
        mgr.informer("apps/v1", "ReplicaSet").apply(
            "MODIFIED", await client.resource("apps/v1", "ReplicaSet").get("default", "web"))

    await sync()
    pods = await stored_pods(reg)
    assert len(pods) == 3 and rsc.expectations.pending("default/web") == (3, 0)
    await sync()  # the pod cache has not shown them yet: no second burst
    assert len(await stored_pods(reg)) == 3
    for p in pods:
        mgr.informer("v1", "Pod").apply("ADDED", p)
    assert rsc.expectations.satisfied("default/web", clock.now())
    await sync()
    assert len(await stored_pods(reg)) == 3
    status = (await client.resource("apps/v1", "ReplicaSet").get("default", "web"))["status"]
    assert status == {"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 0, "availableReplicas": 0,
                      "observedGeneration": 1}
    # a pod goes: observed, replaced once
    gone = pods[0]
    await reg.resource("", "v1", "pods").delete("default", gone["metadata"]["name"], _opts(), _ctx())
    mgr.informer("v1", "Pod").apply("DELETED", gone)
    await sync()
    assert len(await stored_pods(reg)) == 3

    restarted = ControllerManager(RegistryClient(reg), clock, enabled=["replicaset", "deployment"])
    await feed_all(reg, restarted)
    for key in restarted.informer("apps/v1", "ReplicaSet").object_keys():
        await restarted.replicaset.sync(key)
    assert len(await stored_pods(reg)) == 3  # rebuilt caches: nothing created twice


async def test_executor_stops_at_a_failed_burst_and_counts_what_was_not_created(
        registry: tuple[Registry, FakeClock]) -> None:
    reg, _ = registry
    ex = Executor(RegistryClient(reg), None, "test")
    good = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-", "namespace": "default"},
            "spec": TEMPLATE["spec"]}
    bad = {**good, "spec": {"containers": [{"name": "web"}]}}  # neither image nor command: 422
    plan = Plan([SlowStart((Create(good), Create(good), Create(bad), Create(good), Create(good))),
                 Delete(ObjectRef("v1", "Pod", "default", "never"))])
    out = await ex.run(plan)
    assert isinstance(out.error, ApiError) and out.error.code == 422
    # batches of 1 (ok), then 2 with the bad one: stops there; the 2 never tried and the failed one
    # are not created, and the delete after the burst is not attempted
    assert len(out.created) == 2 and out.not_created == 3 and out.failed_deletes == ["default/never"]
    assert len(await stored_pods(reg)) == 2
    gone = Plan([Delete(ObjectRef("v1", "Pod", "default", "missing")),
                 Patch(ObjectRef("v1", "Pod", "default", "missing"), {"metadata": {"labels": {"a": "b"}}})])
    out = await ex.run(gone)
    assert out.error is None and out.writes == 0  # already gone is not a failure
    # a delete whose owner turns out to exist (a stale cache thought it gone) is skipped
    owner = (await stored_pods(reg))[0]
    victim = (await stored_pods(reg))[1]
    ref = ObjectRef("v1", "Pod", "default", owner["metadata"]["name"], owner["metadata"]["uid"])
    out = await ex.run(Plan([Delete(ObjectRef.of(victim), verify_absent=(ref,))]))
    assert out.error is None and len(await stored_pods(reg)) == 2


def _opts() -> Any:
    from nodeagent.cluster.registry.options import DeleteOptions
    return DeleteOptions()


def _ctx() -> Any:
    from nodeagent.cluster.registry.options import Context
    return Context()
