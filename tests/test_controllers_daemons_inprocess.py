"""The DaemonSet and node lifecycle loops over a real in-process registry (memory store, fake
clock), their informers fed from the registry between steps and their queues drained as the
workers would: a DaemonSet follows nodes that join, change and leave, and rolls a new template
out within maxUnavailable; a node whose Lease stops being renewed goes Ready=Unknown with the
unreachable NoExecute taint after the grace period, its pods go after their tolerationSeconds (a
longer toleration keeps its pod), a zone's rate limit and partial-disruption stop hold, and the
taints come off when the node reports again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeagent.cluster.admitters.chain import AdmissionChain
from nodeagent.cluster.controllers.common.meta import format_time
from nodeagent.cluster.controllers.daemonset.placement import target_node_name
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controllers.manager.nodelifecycle import MONITOR_KEY
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock

Obj = dict[str, Any]
CMD = ["sleep", "3600"]


@pytest.fixture
async def env() -> AsyncIterator[tuple[Registry, FakeClock]]:
    clock = FakeClock()
    store = MemoryStore()
    reg = Registry(store, clock, plugins=plugins(clock))
    reg.plugins.admitter = AdmissionChain(reg)  # as the control plane: DefaultTolerationSeconds included
    await reg.ensure_system_namespaces()
    yield reg, clock
    await reg.close()
    await store.close()


def ctx() -> Context:
    return Context(field_manager="test")


async def resync(reg: Registry, mgr: ControllerManager) -> None:
    """What the watches deliver: every informer made current with the registry."""
    client = RegistryClient(reg)
    for (api_version, kind), inf in mgr.informers.items():
        listed = (await client.store(api_version, kind).list(None, ListOptions())).items
        keys = set()
        for obj in listed:
            ns = obj["metadata"].get("namespace")
            k = f"{ns}/{obj['metadata']['name']}" if ns else obj["metadata"]["name"]
            keys.add(k)
            cached = inf.get(k)
            if cached is None or cached["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                inf.apply("MODIFIED", obj)
        for k in inf.object_keys():
            if k not in keys:
                gone = inf.get(k)
                assert gone is not None
                inf.apply("DELETED", dict(gone))


async def settle(reg: Registry, mgr: ControllerManager, ctrl: Controller, rounds: int = 20) -> None:
    """Resync and run every due key, until the queue has nothing due (the workers, one at a time)."""
    for _ in range(rounds):
        await resync(reg, mgr)
        k = ctrl.queue.poll()
        if k is None:
            return
        await ctrl.process_one(k)
    raise AssertionError("the queue never settled")


async def add_node(reg: Registry, clock: FakeClock, name: str, labels: dict[str, str] | None = None,
                   taints: list[Obj] | None = None) -> Obj:
    now = format_time(clock.wall())
    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
                 "spec": {"taints": taints} if taints else {},
                 "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    return await reg.resource("", "v1", "nodes").create(None, node, ctx())


async def renew_lease(reg: Registry, clock: FakeClock, node: str) -> None:
    """The agent's nodelease renewal (kube-node-lease/<node>)."""
    leases = reg.resource("coordination.k8s.io", "v1", "leases")
    spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": format_time(clock.wall())}
    try:
        lease = await leases.get("kube-node-lease", node)
    except StatusError:  # first renewal: create it
        await leases.create("kube-node-lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                "metadata": {"name": node, "namespace": "kube-node-lease"},
                                                "spec": spec}, ctx())
        return
    await leases.update("kube-node-lease", node, {**lease, "spec": spec}, ctx())


async def pods(reg: Registry, ns: str = "default") -> list[Obj]:
    return (await reg.resource("", "v1", "pods").list(ns, ListOptions())).items


async def mark_ready(reg: Registry, clock: FakeClock, pod: Obj) -> None:
    now = format_time(clock.wall())
    await reg.resource("", "v1", "pods").patch(
        pod["metadata"]["namespace"], pod["metadata"]["name"], "merge",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                                        "lastTransitionTime": now}]}},
        ctx(), subresource="status")


def daemonset(name: str, *, selector: dict[str, str] | None = None, strategy: Obj | None = None) -> Obj:
    template: Obj = {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "d", "image": "busybox", "command": CMD}]}}
    if selector:
        template["spec"]["nodeSelector"] = selector
    ds: Obj = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
               "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}}
    if strategy:
        ds["spec"]["updateStrategy"] = strategy
    return ds


def placed(ps: list[Obj]) -> dict[str, str]:
    """node -> pod name, of the pods not being deleted."""
    out: dict[str, str] = {}
    for p in ps:
        if p["metadata"].get("deletionTimestamp"):
            continue
        target = target_node_name(p)
        assert target is not None and target not in out, f"two pods on {target}"
        out[target] = p["metadata"]["name"]
    return out


async def test_daemonset_follows_nodes_joining_changing_and_leaving(env: tuple[Registry, FakeClock]) -> None:
    reg, clock = env
    mgr = ControllerManager(RegistryClient(reg), clock, enabled=["daemonset"])
    dsc = mgr.daemonset
    await add_node(reg, clock, "n1", {"disk": "ssd"})
    await add_node(reg, clock, "n2", {"disk": "ssd"})
    await add_node(reg, clock, "n3", {"disk": "hdd"})  # the nodeSelector leaves it out
    await add_node(reg, clock, "n4", {"disk": "ssd"}, taints=[{"key": "gpu", "effect": "NoSchedule"}])  # untolerated
    await add_node(reg, clock, "n5", {"disk": "ssd"},
                   taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])  # tolerated by daemons
    await reg.resource("apps", "v1", "daemonsets").create("default", daemonset("agent", selector={"disk": "ssd"}),
                                                          ctx())
    await settle(reg, mgr, dsc)
    ps = await pods(reg)
    assert sorted(placed(ps)) == ["n1", "n2", "n5"]
    tols = {(t["key"], t["effect"]): t for t in ps[0]["spec"]["tolerations"]}
    assert ("node.kubernetes.io/not-ready", "NoExecute") in tols and ("node.kubernetes.io/unschedulable",
                                                                       "NoSchedule") in tols
    # the daemon tolerations carry no tolerationSeconds, so DefaultTolerationSeconds added none
    assert "tolerationSeconds" not in tols[("node.kubernetes.io/unreachable", "NoExecute")]
    assert all(p["metadata"]["labels"].get("controller-revision-hash") for p in ps)
    revs = (await reg.resource("apps", "v1", "controllerrevisions").list("default", ListOptions())).items
    assert len(revs) == 1 and revs[0]["revision"] == 1

    await add_node(reg, clock, "n6", {"disk": "ssd"})  # joins
    await settle(reg, mgr, dsc)
    assert sorted(placed(await pods(reg))) == ["n1", "n2", "n5", "n6"]

    nodes = reg.resource("", "v1", "nodes")
    n3 = await nodes.get(None, "n3")
    await nodes.update(None, "n3", {**n3, "metadata": {**n3["metadata"], "labels": {"disk": "ssd"}}}, ctx())
    await settle(reg, mgr, dsc)
    assert sorted(placed(await pods(reg))) == ["n1", "n2", "n3", "n5", "n6"]

    n6 = await nodes.get(None, "n6")  # an untolerated NoExecute taint: the running pod goes too
    await nodes.update(None, "n6", {**n6, "spec": {"taints": [{"key": "maint", "effect": "NoExecute"}]}}, ctx())
    await settle(reg, mgr, dsc)
    assert sorted(placed(await pods(reg))) == ["n1", "n2", "n3", "n5"]
    n4 = await nodes.get(None, "n4")  # an untolerated NoSchedule taint lifted: a pod comes
    await nodes.update(None, "n4", {**n4, "spec": {}}, ctx())
    await settle(reg, mgr, dsc)
    assert sorted(placed(await pods(reg))) == ["n1", "n2", "n3", "n4", "n5"]
    await nodes.delete(None, "n2", DeleteOptions(), ctx())  # leaves: its pinned, unbound pod goes
    await settle(reg, mgr, dsc)
    assert sorted(placed(await pods(reg))) == ["n1", "n3", "n4", "n5"]
    status = (await reg.resource("apps", "v1", "daemonsets").get("default", "agent"))["status"]
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberMisscheduled"],
            status["numberReady"], status["updatedNumberScheduled"]) == (4, 4, 0, 0, 4)
    assert dsc.failures == 0


async def test_rolling_update_replaces_pods_within_max_unavailable(env: tuple[Registry, FakeClock]) -> None:
    reg, clock = env
    mgr = ControllerManager(RegistryClient(reg), clock, enabled=["daemonset"])
    dsc = mgr.daemonset
    for n in ("n1", "n2", "n3", "n4"):
        await add_node(reg, clock, n)
    dss = reg.resource("apps", "v1", "daemonsets")
    await dss.create("default", daemonset("web", strategy={"type": "RollingUpdate",
                                                           "rollingUpdate": {"maxUnavailable": 1}}), ctx())
    await settle(reg, mgr, dsc)
    for p in await pods(reg):
        await mark_ready(reg, clock, p)
    await settle(reg, mgr, dsc)
    old = {p["metadata"]["name"] for p in await pods(reg)}
    assert len(old) == 4

    ds = await dss.get("default", "web")
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    await dss.update("default", "web", ds, ctx())
    steps = 0
    while True:
        await settle(reg, mgr, dsc)
        ps = await pods(reg)
        live = [p for p in ps if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in live if (p.get("status") or {}).get("conditions")]
        assert len(ready) >= 3, f"more than maxUnavailable=1 nodes without an available pod: {len(ready)} ready"
        assert len(placed(ps)) <= 4
        if len(ready) == 4 and not ({p["metadata"]["name"] for p in live} & old):
            break
        for p in live:
            if not (p.get("status") or {}).get("conditions"):
                await mark_ready(reg, clock, p)  # the kubelet reports the new pod ready
        steps += 1
        assert steps < 20, "the rollout did not finish"
    assert steps >= 4  # one node at a time
    revs = (await reg.resource("apps", "v1", "controllerrevisions").list("default", ListOptions())).items
    assert sorted(r["revision"] for r in revs) == [1, 2]
    status = (await dss.get("default", "web"))["status"]
    assert (status["updatedNumberScheduled"], status["numberAvailable"], status["observedGeneration"]) == (4, 4, 2)

    # OnDelete: a new template replaces nothing until a pod is deleted by hand
    ds = await dss.get("default", "web")
    ds["spec"]["updateStrategy"] = {"type": "OnDelete"}
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:3"
    await dss.update("default", "web", ds, ctx())
    before = {p["metadata"]["name"] for p in await pods(reg)}
    await settle(reg, mgr, dsc)
    assert {p["metadata"]["name"] for p in await pods(reg)} == before
    assert dsc.failures == 0


async def test_unrenewed_lease_taints_evicts_rate_limited_and_recovers(env: tuple[Registry, FakeClock]) -> None:
    reg, clock = env
    mgr = ControllerManager(RegistryClient(reg), clock, enabled=["nodelifecycle"])
    nlc = mgr.nodelifecycle
    zone_a = [f"a{i}" for i in range(4)]
    zone_b = [f"b{i}" for i in range(4)]
    for n in zone_a:
        await add_node(reg, clock, n, {"topology.kubernetes.io/zone": "a"})
    for n in zone_b:
        await add_node(reg, clock, n, {"topology.kubernetes.io/zone": "b"})
    for n in zone_a + zone_b:
        await renew_lease(reg, clock, n)
    podapi = reg.resource("", "v1", "pods")
    spec: Obj = {"nodeName": "a0", "containers": [{"name": "c", "image": "busybox", "command": CMD}]}
    await podapi.create("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "short"},
                                    "spec": spec}, ctx())  # DefaultTolerationSeconds: 300 s
    await podapi.create("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "long"},
                                    "spec": {**spec, "tolerations": [
                                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                         "effect": "NoExecute", "tolerationSeconds": 900}]}}, ctx())
    short = await podapi.get("default", "short")
    assert {t["tolerationSeconds"] for t in short["spec"]["tolerations"]} == {300}

    down = {"a0", "a1", "b0", "b1", "b2"}  # zone a: 2 of 4 (Normal); zone b: 3 of 4 (PartialDisruption)

    async def tick(seconds: float) -> None:
        """Time passes; the healthy agents renew; the monitor pass and the node syncs run."""
        clock.advance(seconds)
        for n in zone_a + zone_b:
            if n not in down:
                await renew_lease(reg, clock, n)
        await resync(reg, mgr)
        await nlc.sync(MONITOR_KEY)
        await settle(reg, mgr, nlc)

    async def state(n: str) -> tuple[str, set[str]]:
        node = await reg.resource("", "v1", "nodes").get(None, n)
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        return ready, {f"{t['key'].split('/')[-1]}:{t['effect']}" for t in node["spec"].get("taints") or []}

    await tick(0)
    await tick(30)
    assert (await state("a0")) == ("True", set())
    await tick(15)  # 45 s since the last renewal: within the 50 s grace
    assert (await state("a0"))[0] == "True"
    await tick(10)  # 55 s: Unknown; zone a's bucket lets one node through now
    assert (await state("a0")) == ("Unknown", {"unreachable:NoExecute", "unreachable:NoSchedule"})
    assert (await state("a1")) == ("Unknown", {"unreachable:NoSchedule"})  # queued: 0.1 node/s
    assert (await state("a2")) == ("True", set())
    for b in ("b0", "b1", "b2"):  # partial disruption of a small zone: no NoExecute taints at all
        assert (await state(b)) == ("Unknown", {"unreachable:NoSchedule"})
    assert nlc.zone_states == {":\x00:a": "Normal", ":\x00:b": "PartialDisruption"}
    await tick(5)
    assert (await state("a1"))[1] == {"unreachable:NoSchedule"}
    clock.advance(4)  # 9 s after the first; no monitor pass, the tainting key alone (every 0.1 s)
    await settle(reg, mgr, nlc)
    assert (await state("a1"))[1] == {"unreachable:NoSchedule"}
    clock.advance(1.5)  # past 10 s: the second token, taken between two monitor passes
    await settle(reg, mgr, nlc)
    assert (await state("a1"))[1] == {"unreachable:NoExecute", "unreachable:NoSchedule"}
    await tick(0)
    await tick(100)
    for b in ("b0", "b1", "b2"):
        assert (await state(b)) == ("Unknown", {"unreachable:NoSchedule"})

    # the pods on a0: tainted 110 s ago; nothing evicted before 300 s
    assert not (await podapi.get("default", "short"))["metadata"].get("deletionTimestamp")
    await tick(185)  # 295 s
    assert not (await podapi.get("default", "short"))["metadata"].get("deletionTimestamp")
    await tick(10)  # 305 s after the taint
    evicted = {p["metadata"]["name"] for p in await pods(reg) if p["metadata"].get("deletionTimestamp")}
    remaining = {p["metadata"]["name"] for p in await pods(reg)}
    assert "short" not in remaining - evicted and "long" in remaining and "long" not in evicted
    # a0 comes back: the agent renews and posts Ready
    down.discard("a0")
    nodes = reg.resource("", "v1", "nodes")
    a0 = await nodes.get(None, "a0")
    now = format_time(clock.wall())
    a0["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": now, "lastTransitionTime": now}]
    await nodes.update(None, "a0", a0, ctx(), subresource="status")
    await tick(1)
    assert (await state("a0")) == ("True", set())
    await tick(600)  # the pod with the longer toleration stays once the taint is gone
    assert "long" in {p["metadata"]["name"] for p in await pods(reg)
                      if not p["metadata"].get("deletionTimestamp")}
