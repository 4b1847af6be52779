"""The disruption controller's loop over a real in-process registry (memory store, fake clock), its
informers fed by hand: the finders resolve a Deployment through its ReplicaSet, a StatefulSet, and
any other served kind by reading it (a Job has no scale: fail-safe), the status is written through
/status, a sync that fails safe is retried, pod and scale changes wake the budgets that select the
pods, and a recent eviction asks for a look again when its DeletionTimeout is over."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeagent.cluster.controllers.manager.disruption import SyncFailed
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock
from nodeagent.core.timefmt import rfc3339

SPEC = {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}


@pytest.fixture
async def env() -> AsyncIterator[tuple[RegistryClient, ControllerManager, FakeClock]]:
    clock = FakeClock()
    store = MemoryStore()
    reg = Registry(store, clock, plugins=plugins(clock))
    await reg.ensure_system_namespaces()
    client = RegistryClient(reg)
    yield client, ControllerManager(client, clock, enabled=["disruption"]), clock
    await reg.close()
    await store.close()


async def create(client: RegistryClient, mgr: ControllerManager, obj: dict[str, Any]) -> dict[str, Any]:
    """Create and feed the informer of its kind, as the control plane's watch would."""
    obj["metadata"].setdefault("namespace", "default")
    made = await client.resource(obj["apiVersion"], obj["kind"]).create("default", obj)
    inf = mgr.informers.get((obj["apiVersion"], obj["kind"]))
    if inf is not None:
        inf.apply("ADDED", made)
    return made


def ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True}


async def ready_pod(client: RegistryClient, mgr: ControllerManager, name: str, owner: dict[str, Any] | None,
                    app: str = "web") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": app}}
    if owner is not None:
        meta["ownerReferences"] = [ref(owner)]
    p = await create(client, mgr, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": SPEC})
    p = await client.resource("v1", "Pod").patch("default", name, {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}, "merge", "status")
    mgr.informer("v1", "Pod").apply("MODIFIED", p)
    return p


def workload(kind: str, name: str, replicas: int, app: str = "web") -> dict[str, Any]:
    labels = {"app": app}
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": SPEC}}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


async def budget(client: RegistryClient, mgr: ControllerManager, name: str, app: str, **spec: Any) -> str:
    await create(client, mgr, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                               "spec": {"selector": {"matchLabels": {"app": app}}, **spec}})
    return f"default/{name}"


async def stored_status(client: RegistryClient, mgr: ControllerManager, name: str) -> dict[str, Any]:
    """The budget as stored, fed back to the informer (the controller's own write, watched)."""
    pdb = await client.resource("policy/v1", "PodDisruptionBudget").get("default", name)
    mgr.informer("policy/v1", "PodDisruptionBudget").apply("MODIFIED", pdb)
    out: dict[str, Any] = pdb["status"]
    return out


def drained(mgr: ControllerManager) -> list[Any]:
    """Take every queued key (what the workers would)."""
    q, keys = mgr.disruption.queue, []
    while (k := q.poll()) is not None:
        keys.append(k)
        q.done(k)
    return keys


def counts(st: dict[str, Any]) -> tuple[int, int, int, int]:
    return st["expectedPods"], st["desiredHealthy"], st["currentHealthy"], st["disruptionsAllowed"]


async def test_a_deployments_scale_through_its_replicaset(env: Any) -> None:
    client, mgr, _ = env
    d = await create(client, mgr, workload("Deployment", "web", 4))
    rs = workload("ReplicaSet", "web-1", 2)
    rs["metadata"]["ownerReferences"] = [ref(d)]
    rs = await create(client, mgr, rs)
    for i in range(2):
        await ready_pod(client, mgr, f"web-{i}", rs)
    k = await budget(client, mgr, "web", "web", maxUnavailable="25%")
    assert await mgr.disruption.sync(k) is None
    st = await stored_status(client, mgr, "web")
    assert counts(st) == (4, 3, 2, 0) and st["observedGeneration"] == 1
    # the Deployment scaled down: its update wakes the budget
    drained(mgr)
    d2 = await client.resource("apps/v1", "Deployment").patch("default", "web", {"spec": {"replicas": 2}}, "merge")
    mgr.informer("apps/v1", "Deployment").apply("MODIFIED", d2)
    assert drained(mgr) == [k]
    await mgr.disruption.sync(k)
    assert counts(await stored_status(client, mgr, "web")) == (2, 1, 2, 1)


async def test_a_statefulset_and_an_uncached_kind_without_a_scale(env: Any) -> None:
    client, mgr, _ = env
    ss = await create(client, mgr, workload("StatefulSet", "db", 3, app="db"))
    for i in range(3):
        await ready_pod(client, mgr, f"db-{i}", ss, app="db")
    k = await budget(client, mgr, "db", "db", minAvailable="50%")
    await mgr.disruption.sync(k)
    assert counts(await stored_status(client, mgr, "db")) == (3, 2, 3, 1)
    job = await create(client, mgr, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
                                     "spec": {"template": {"metadata": {"labels": {"app": "batch"}},
                                                           "spec": {**SPEC, "restartPolicy": "Never"}}}})
    await ready_pod(client, mgr, "batch-0", job, app="batch")
    k = await budget(client, mgr, "batch", "batch", maxUnavailable=1)
    with pytest.raises(SyncFailed):
        await mgr.disruption.sync(k)
    st = await stored_status(client, mgr, "batch")
    assert st["disruptionsAllowed"] == 0
    assert [(c["status"], c["reason"], c["message"]) for c in st["conditions"]] == [
        ("False", "SyncFailed", 'found no controllers for pod "batch-0"')]


async def test_pods_wake_the_budgets_that_select_them(env: Any) -> None:
    client, mgr, _ = env
    ka = await budget(client, mgr, "a", "web", minAvailable=1)
    await budget(client, mgr, "b", "db", minAvailable=1)
    assert sorted(drained(mgr)) == [ka, "default/b"]  # the budgets' own events
    await ready_pod(client, mgr, "naked", None)
    assert drained(mgr) == [ka]


async def test_a_recent_eviction_is_looked_at_again_after_the_deletion_timeout(env: Any) -> None:
    client, mgr, clock = env
    rs = await create(client, mgr, workload("ReplicaSet", "web", 2))
    for i in range(2):
        await ready_pod(client, mgr, f"web-{i}", rs)
    k = await budget(client, mgr, "web", "web", minAvailable=1)
    await mgr.disruption.sync(k)
    pdbs = client.resource("policy/v1", "PodDisruptionBudget")
    pdb = await pdbs.get("default", "web")
    pdb["status"]["disruptedPods"] = {"web-0": rfc3339(clock.wall() - 20)}  # what an eviction records
    pdb = await pdbs.update("default", pdb, "status")
    mgr.informer("policy/v1", "PodDisruptionBudget").apply("MODIFIED", pdb)
    after = await mgr.disruption.sync(k)
    assert after == pytest.approx(100.0, abs=1.0)
    assert counts(await stored_status(client, mgr, "web")) == (2, 1, 1, 0)
    clock.advance(after + 1)
    assert await mgr.disruption.sync(k) is None
    st = await stored_status(client, mgr, "web")
    assert counts(st) == (2, 1, 2, 1) and "disruptedPods" not in st
    assert len((await client.store("v1", "Pod").list("default", ListOptions())).items) == 2


async def test_a_disruption_target_not_followed_by_a_delete_is_reset_after_2_minutes(env: Any) -> None:
    """syncStalePodDisruption: an eviction marked the pod, but the delete never came."""
    client, mgr, clock = env
    p = await ready_pod(client, mgr, "p", None)
    pods = client.resource("v1", "Pod")
    marked = await pods.patch("default", "p", {"status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": rfc3339(clock.wall() - 30)}]}}, "strategic",
        "status")
    drained(mgr)
    mgr.informer("v1", "Pod").apply("MODIFIED", marked)
    key = "stale-pod:default/p"
    assert drained(mgr) == []  # not yet: due in 90 s
    assert await mgr.disruption.sync(key) == pytest.approx(90.0, abs=1.0)
    clock.advance(91)
    assert drained(mgr) == [key]
    assert await mgr.disruption.sync(key) is None
    got = await pods.get("default", "p")
    (cond,) = [c for c in got["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert cond["status"] == "False" and cond["lastTransitionTime"] == rfc3339(clock.wall())
    assert [c["status"] for c in got["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    mgr.informer("v1", "Pod").apply("MODIFIED", got)
    assert await mgr.disruption.sync(key) is None  # nothing more to do
    assert p["metadata"]["uid"] == got["metadata"]["uid"]
