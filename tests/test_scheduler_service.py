"""The scheduler service against in-memory agents: placement, unschedulable reasons, preemption
through the agents, refusals with backoff, node readiness and NodeLost, and restarts from SQLite
that lose nothing and double nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_scheduler_support import FakeAgents, make_service, pod_manifest, settle, wait_for

from nodeagent.cluster.apiserver.operations import ApiError, Operations
from nodeagent.cluster.server import SchedulerService
from nodeagent.cluster.store.sqlite import SchedulerSqliteStore
from nodeagent.core.clock import FakeClock

PC_HIGH = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": "high"}, "value": 1000}
PC_LOW = {**PC_HIGH, "metadata": {"name": "low"}, "value": 10}


def agents(n: int = 3, **kw: Any) -> FakeAgents:
    fake = FakeAgents()
    for i in range(n):
        fake.add_node(f"n{i}", **kw)
    return fake


async def started(fake: FakeAgents, **kw: Any) -> tuple[SchedulerService, Operations]:
    svc = make_service(fake, **kw)
    await svc.start(serve=False)
    return svc, Operations(svc)


def pods_of(svc: SchedulerService) -> dict[str, tuple[str | None, str]]:
    return {k: (r.node, r.phase) for k, r in svc.state.pods.items()}


def scheduled_condition(svc: SchedulerService, key: str) -> dict[str, Any]:
    conds = [c for c in svc.state.pods[key].status.get("conditions", []) if c["type"] == "PodScheduled"]
    assert len(conds) == 1
    return conds[0]


async def test_pods_spread_by_requests_and_run_on_their_agents() -> None:
    fake = agents()
    svc, ops = await started(fake)
    try:
        for i in range(3):
            await ops.create_pod("default", pod_manifest(f"p{i}", cpu="600m"))
        await settle(svc)
        nodes = {svc.state.pods[f"default/p{i}"].node for i in range(3)}
        assert nodes == {"n0", "n1", "n2"}
        for i in range(3):
            rec = svc.state.pods[f"default/p{i}"]
            assert fake.where(rec.key) == [rec.node]
            assert rec.phase == "Running" and scheduled_condition(svc, rec.key)["status"] == "True"
    finally:
        await svc.stop()


async def test_most_allocated_packs() -> None:
    fake = agents()
    svc, ops = await started(fake, scoring="MostAllocated")
    try:
        for i in range(3):
            await ops.create_pod("default", pod_manifest(f"p{i}", cpu="300m"))
            await settle(svc)
        assert len({svc.state.pods[f"default/p{i}"].node for i in range(3)}) == 1
    finally:
        await svc.stop()


async def test_a_pod_too_big_stays_pending_with_the_reasons() -> None:
    fake = agents()
    fake.add_node("n3", memory_pressure=True)
    svc, ops = await started(fake)
    try:
        await svc.set_unschedulable("n2", True)
        await ops.create_pod("default", pod_manifest("big", cpu="2", memory="2Gi"))
        await ops.create_pod("default", pod_manifest("be", cpu=None, memory=None, nodeSelector={"kubernetes.io/hostname": "n3"}))
        await settle(svc)
        rec = svc.state.pods["default/big"]
        cond = scheduled_condition(svc, "default/big")
        assert rec.node is None and rec.phase == "Pending"
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        # n3 is under memory pressure, but a Burstable pod tolerates that (kube's admission)
        assert cond["message"] == (
            "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient cpu, "
            "3 Insufficient memory. preemption: 0/4 nodes are available: 1 Preemption is not "
            "helpful for scheduling, 3 No preemption victims found for incoming pod.")
        be = scheduled_condition(svc, "default/be")
        assert be["message"] == (
            "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }, "
            "1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. "
            "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")
        assert fake.calls == []
    finally:
        await svc.stop()


async def test_best_effort_pods_avoid_memory_pressure_burstable_do_not() -> None:
    fake = agents(2)
    fake.add_node("n0", memory_pressure=True)
    svc, ops = await started(fake)
    try:
        for i in range(4):
            await ops.create_pod("default", pod_manifest(f"be{i}", cpu=None, memory=None))
        await ops.create_pod("default", pod_manifest("burst", cpu="900m", nodeSelector={"kubernetes.io/hostname": "n0"}))
        await settle(svc)
        assert {svc.state.pods[f"default/be{i}"].node for i in range(4)} == {"n1"}
        assert svc.state.pods["default/burst"].node == "n0"
        taints = svc.node_object("n0")["spec"]["taints"]
        assert {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"} in taints
    finally:
        await svc.stop()


async def test_preemption_deletes_the_victim_through_its_agent_then_binds() -> None:
    fake = agents()
    fake.linger = 3  # the victim takes a few polls to stop
    svc, ops = await started(fake)
    try:
        await ops.create_priority_class(PC_HIGH)
        await ops.create_priority_class(PC_LOW)
        for i in range(3):
            await ops.create_pod("default", pod_manifest(f"low{i}", cpu="600m", priority_class="low", grace=2))
        await settle(svc)
        await ops.create_pod("default", pod_manifest("vip", cpu="800m", priority_class="high"))
        await wait_for(lambda: svc.state.pods["default/vip"].confirmed, what="the preemptor bound")
        vip = svc.state.pods["default/vip"]
        lows = [k for k in svc.state.pods if k.startswith("default/low")]
        assert len(lows) == 2, lows  # exactly one victim, deleted from the store once gone
        victim = ({"default/low0", "default/low1", "default/low2"} - set(lows)).pop()
        assert ("delete", vip.node, victim) in fake.calls
        assert fake.where(victim) == [] and fake.where(vip.key) == [vip.node]
        assert vip.nominated is None and svc.state.nominations == {}
        assert svc.binder.counters["victims"] == 1
    finally:
        await svc.stop()


async def test_equal_priority_never_preempts() -> None:
    fake = agents(1)
    svc, ops = await started(fake)
    try:
        await ops.create_pod("default", pod_manifest("a", cpu="800m"))
        await settle(svc)
        await ops.create_pod("default", pod_manifest("b", cpu="800m"))
        await settle(svc)
        assert pods_of(svc) == {"default/a": ("n0", "Running"), "default/b": (None, "Pending")}
        assert "No preemption victims" in scheduled_condition(svc, "default/b")["message"]
    finally:
        await svc.stop()


async def test_agent_refusal_requeues_with_backoff_and_another_node_takes_it() -> None:
    fake = agents(2)
    fake.refuse["n0"] = ("OutOfmemory", "Node didn't have enough resource: memory")
    svc, ops = await started(fake)
    try:
        await ops.create_pod("default", pod_manifest("p", cpu="100m"))
        await wait_for(lambda: svc.state.pods["default/p"].confirmed, what="bound")
        assert svc.state.pods["default/p"].node == "n1"
        creates = [c for c in fake.calls if c[0] == "create"]
        assert creates[0][1] == "n0" and creates[-1] == ("create", "n1", "default/p")
        assert svc.binder.counters["bind_failures"] >= 1
    finally:
        await svc.stop()


async def test_refused_everywhere_stays_pending_with_the_agents_reason() -> None:
    fake = agents(1)
    fake.refuse["n0"] = ("OutOfmemory", "no room")
    svc, ops = await started(fake)
    try:
        await ops.create_pod("default", pod_manifest("p"))
        await wait_for(lambda: svc.binder.counters["bind_failures"] >= 1, what="a refusal")
        await asyncio.sleep(0.5)  # several backoff periods: the refusing node is not hammered
        assert [c for c in fake.calls if c[0] == "create"] == [("create", "n0", "default/p")]
        rec = svc.state.pods["default/p"]
        assert rec.node is None and "default/p" not in svc.state.table.bound
        cond = scheduled_condition(svc, "default/p")
        assert cond["reason"] == "SchedulerError" and "OutOfmemory: no room" in cond["message"]
    finally:
        await svc.stop()


async def test_silent_node_turns_not_ready_then_its_pods_fail_as_node_lost() -> None:
    fake = agents(2)
    clock = FakeClock()
    svc, ops = await started(fake, clock=clock, nodeMonitorGracePeriod="40s", podEvictionTimeout="5m")
    try:
        await ops.create_pod("default", pod_manifest("p", cpu="600m", nodeSelector={"kubernetes.io/hostname": "n0"}))
        await settle(svc)
        assert svc.state.pods["default/p"].node == "n0"
        fake.down.add("n0")
        clock.advance(30)
        await svc.poll_node("n1")
        svc.check_nodes()
        assert svc.state.table.spec("n0").ready
        clock.advance(11)
        await svc.poll_node("n1")
        svc.check_nodes()
        assert not svc.state.table.spec("n0").ready and svc.state.table.spec("n1").ready
        ready = [c for c in svc.node_object("n0")["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "Unknown" and ready[0]["reason"] == "NodeStatusUnknown"
        await ops.create_pod("default", pod_manifest("q", cpu="100m"))
        await settle(svc)
        assert svc.state.pods["default/q"].node == "n1"
        clock.advance(299)
        svc.check_nodes()
        assert svc.state.pods["default/p"].phase == "Running"
        clock.advance(2)
        svc.check_nodes()
        rec = svc.state.pods["default/p"]
        assert (rec.phase, rec.status["reason"]) == ("Failed", "NodeLost")
        assert rec.status["message"] == "Node n0 which was running pod p is unresponsive"
        assert "default/p" not in svc.state.table.bound
        # the node comes back: the store says the pod is dead, so the agent must let it go
        fake.down.discard("n0")
        await svc.poll_node("n0")
        await settle(svc)
        assert fake.where("default/p") == []
    finally:
        await svc.stop()


async def test_restart_from_sqlite_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    fake = agents()
    db = str(tmp_path / "s.db")
    svc = make_service(fake, store=SchedulerSqliteStore(db), stateDir=str(tmp_path))
    await svc.start(serve=False)
    ops = Operations(svc)
    await ops.create_priority_class(PC_HIGH)
    await ops.create_namespace({"metadata": {"name": "team"}})
    await ops.create_quota("team", {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
                                    "spec": {"hard": {"pods": "2"}}})
    for i in range(4):
        await ops.create_pod("default", pod_manifest(f"p{i}", cpu="200m"))
    await ops.create_pod("team", pod_manifest("t0", cpu="100m", priority_class="high"))
    await ops.create_pod("default", pod_manifest("huge", cpu="5"))
    await svc.set_unschedulable("n2", True)
    await settle(svc)
    before = {k: (r.uid, r.node, r.phase, r.info.priority) for k, r in svc.state.pods.items()}
    creates = len([c for c in fake.calls if c[0] == "create"])
    await svc.stop()

    svc2 = make_service(fake, store=SchedulerSqliteStore(db), stateDir=str(tmp_path))
    await svc2.start(serve=False)
    ops2 = Operations(svc2)
    try:
        await settle(svc2)
        after = {k: (r.uid, r.node, r.phase, r.info.priority) for k, r in svc2.state.pods.items()}
        assert after == before
        assert len([c for c in fake.calls if c[0] == "create"]) == creates  # nothing re-posted
        assert sum(len(p) for p in fake.pods.values()) == 5
        assert svc2.state.nodes["n2"].unschedulable
        assert ops2.quota("team", "q")["status"]["used"] == {"pods": "1"}
        assert ops2.priority_class("high")["value"] == 1000
        assert "default/huge" in svc2.binder.queue
        await ops2.create_pod("team", pod_manifest("t1", cpu="100m"))
        with pytest.raises(ApiError) as e:
            await ops2.create_pod("team", pod_manifest("t2", cpu="100m"))
        assert e.value.code == 403 and "exceeded quota: q" in e.value.message
    finally:
        await svc2.stop()


async def test_restart_between_the_binding_write_and_the_agent_rebinds(tmp_path: Path) -> None:
    """The store says bound, the agent never got it (killed in between): POSTed again, once."""
    fake = agents(1)
    db = str(tmp_path / "s.db")
    svc = make_service(fake, store=SchedulerSqliteStore(db))
    await svc.start(serve=False)
    await Operations(svc).create_pod("default", pod_manifest("p"))
    await settle(svc)
    await svc.stop()
    fake.pods["n0"].clear()  # as if the POST never happened
    rec = svc.state.pods["default/p"]
    rec.status["conditions"] = []  # and the confirmation was never written
    store = SchedulerSqliteStore(db)
    store.apply([__import__("nodeagent.cluster.store.sqlite", fromlist=["SchedulerPut"]).SchedulerPut(
        "pods", "default/p", __import__("json").dumps(rec.obj), 99)])
    store.close()
    svc2 = make_service(fake, store=SchedulerSqliteStore(db))
    await svc2.start(serve=False)
    try:
        await settle(svc2)
        assert fake.where("default/p") == ["n0"]
        assert svc2.state.pods["default/p"].confirmed
        assert [c for c in fake.calls if c[0] == "create"] == [("create", "n0", "default/p")] * 2
    finally:
        await svc2.stop()


async def test_pods_the_store_lacks_are_adopted_and_counted() -> None:
    fake = agents(1)
    fake.pods["n0"]["default/manual"] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "manual", "namespace": "default", "uid": "u-1",
                                                        "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"containers": [{"name": "c", "command": ["x"], "resources": {"requests": {"cpu": "700m"}}}]},
        "status": {"phase": "Running"}}
    fake.pods["n0"]["kube-system/static"] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static", "namespace": "kube-system", "uid": "u-2",
                                                        "annotations": {"kubernetes.io/config.source": "file"}},
        "spec": {"containers": [{"name": "c", "command": ["x"], "resources": {"requests": {"cpu": "200m"}}}]},
        "status": {"phase": "Running"}}
    svc, ops = await started(fake)
    try:
        rec = svc.state.pods["default/manual"]
        assert (rec.node, rec.uid, rec.confirmed) == ("n0", "u-1", True)
        assert "kube-system/static" not in svc.state.pods
        await ops.create_pod("default", pod_manifest("p", cpu="200m"))
        await settle(svc)
        cond = scheduled_condition(svc, "default/p")
        assert "1 Insufficient cpu" in cond["message"]  # 1000m - 700m - 200m (static) < 200m
    finally:
        await svc.stop()


async def test_duplicate_on_another_node_is_deleted_there() -> None:
    fake = agents(2)
    svc, ops = await started(fake)
    try:
        await ops.create_pod("default", pod_manifest("p", nodeSelector={"kubernetes.io/hostname": "n0"}))
        await settle(svc)
        copy = dict(fake.pods["n0"]["default/p"])
        fake.pods["n1"]["default/p"] = copy
        svc.state.pods["default/p"].changed_at = -1
        await svc.poll_node("n1")
        await settle(svc)
        assert fake.where("default/p") == ["n0"]
    finally:
        await svc.stop()


async def test_deleting_a_pod_waits_for_the_agent() -> None:
    fake = agents(1)
    fake.linger = 2
    svc, ops = await started(fake)
    try:
        await ops.create_pod("default", pod_manifest("p"))
        await settle(svc)
        obj = await ops.delete_pod("default", "p", 5)
        assert "deletionTimestamp" in obj["metadata"] and obj["metadata"]["deletionGracePeriodSeconds"] == 5
        assert "default/p" in svc.state.pods  # Terminating until the agent has stopped it
        await wait_for(lambda: "default/p" not in svc.state.pods, what="deletion")
        assert fake.where("default/p") == [] and "default/p" not in svc.state.table.bound
    finally:
        await svc.stop()


async def test_registration_adds_a_node_and_its_url() -> None:
    fake = agents(0)
    fake.add_node("n9")
    svc = make_service(fake, nodes=[])
    await svc.start(serve=False)
    try:
        report = dict(fake.nodes["n9"])
        report["metadata"] = {**report["metadata"], "annotations": {"nodeagent.io/api-url": "http://10.1.2.3:10250"}}
        node = await svc.report_node("n9", report)
        assert node["metadata"]["annotations"]["nodeagent.io/api-url"] == "http://10.1.2.3:10250"
        assert svc.state.nodes["n9"].registered and svc.state.table.spec("n9").ready
        await Operations(svc).create_pod("default", pod_manifest("p"))
        await settle(svc)
        assert fake.where("default/p") == ["n9"]
    finally:
        await svc.stop()


async def test_a_burst_larger_than_one_batch_is_all_scheduled() -> None:
    """The loop schedules up to BATCH pods per turn: none may be left behind between turns."""
    fake = agents(3, cpu="64", pods="500")
    svc, ops = await started(fake)
    try:  # gathered: all 300 are queued in one turn, before the loop wakes up
        await asyncio.gather(*(ops.create_pod("default", pod_manifest(f"p{i}", cpu="10m", memory="1Mi")) for i in range(300)))
        await wait_for(lambda: svc.binder.counters["bound"] == 300, what="300 bound")
        assert svc.binder.queue.counts() == {"active": 0, "backoff": 0, "in-flight": 0, "unschedulable": 0}
        assert sum(len(p) for p in fake.pods.values()) == 300
    finally:
        await svc.stop()


async def test_default_store_is_sqlite_in_a_writer_process(tmp_path: Path) -> None:
    fake = agents(2)
    cfg = {"nodes": [{"name": n, "url": f"http://{n}:1"} for n in fake.nodes], "authentication": "none",
           "stateDir": str(tmp_path), "nodePollInterval": "1h"}
    from nodeagent.cluster.config import parse_scheduler_config
    svc = SchedulerService(parse_scheduler_config(cfg, "t"), agents=fake)
    await svc.start(serve=False)
    await Operations(svc).create_pod("default", pod_manifest("p"))
    await settle(svc)
    uid = svc.state.pods["default/p"].uid
    await svc.stop()
    assert (tmp_path / "scheduler.db").exists()
    svc2 = SchedulerService(parse_scheduler_config(cfg, "t"), agents=fake)
    await svc2.start(serve=False)
    try:
        rec = svc2.state.pods["default/p"]
        assert (rec.uid, rec.confirmed, rec.node in fake.nodes) == (uid, True, True)
    finally:
        await svc2.stop()
