"""The HPA loop with Pods and External metrics (test_controller_manager_hpa.py's world: a real in-process
registry, a fake clock, pods fed to the informer): Pods metrics from the agents' pod series in the
sample window, External metrics from an ExternalSource the loop queries before each reconcile (here an
in-memory one that records its queries; tests/test_kube_hpa_external.py runs the real Prometheus)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from test_controller_manager_hpa import Recorded, World

from nodeagent.cluster.autoscaling.hpa.controller import ControllerConfig
from nodeagent.cluster.autoscaling.metrics.external import ExternalMetricError, Sample
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.manager.horizontal import HorizontalSettings
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock
from nodeagent.core.selectors import LabelSelector

NS = "default"
QUEUE = {"matchLabels": {"queue": "orders"}}


@dataclass
class Queues:
    """An ExternalSource over fixed values: metric name -> milli-values (or the error to raise)."""

    values: dict[str, list[int] | ExternalMetricError] = field(default_factory=dict)
    queries: list[tuple[str, str, str]] = field(default_factory=list)
    now: float = 0.0

    async def samples(self, namespace: str, name: str, selector: LabelSelector) -> list[Sample]:
        self.queries.append((namespace, name, str(selector)))
        got = self.values.get(name, [])
        if isinstance(got, ExternalMetricError):
            raise got
        return [Sample({"queue": "orders"}, v, self.now) for v in got]


@pytest.fixture
async def world() -> AsyncIterator[tuple[World, Queues]]:
    clock = FakeClock()
    reg = Registry(MemoryStore(), clock, plugins=plugins(clock))
    await reg.ensure_system_namespaces()
    client = RegistryClient(reg)
    window = SampleWindow(capacity=8, max_gap=2.5)
    recorded, queues = Recorded(), Queues()
    settings = HorizontalSettings(controller=ControllerConfig(downscale_stabilization=0.0), metric_window=2.5)
    mgr = ControllerManager(client, clock, enabled=["horizontalpodautoscaling"], recorder=lambda _c: recorded,
                            metrics=window, hpa=settings, external_metrics=queues)
    yield World(reg, clock, client, mgr, window, recorded), queues
    await reg.close()
    await reg.store.close()


def active(hpa: dict[str, Any]) -> tuple[str, str, str]:
    """The ScalingActive condition: status, reason, message."""
    c = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingActive")
    return c["status"], c["reason"], c["message"]


async def status_replicas(w: World, n: int) -> None:
    """What the Deployment controller would report: the scale's status.replicas (statusReplicas)."""
    deployments = w.client.resource("apps/v1", "Deployment")
    dep = await deployments.get(NS, "web")
    await deployments.update(NS, {**dep, "status": {"replicas": n}}, "status")


def pod_load(w: World, cores_per_pod: float, seconds: int = 3) -> None:
    """`seconds` of 1 s samples of every pod's own series (pod_cpu_usage_seconds_total)."""
    for _ in range(seconds):
        w.clock.advance(1.0)
        for k in w.mgr.informer("v1", "Pod").object_keys():
            pod = k.split("/")[1]
            w.counters[pod] = w.counters.get(pod, 0) + round(cores_per_pod * 1e9)
            w.window.add(("pod", NS, pod), w.clock.wall(), w.counters[pod], 64 << 20)


def external(target: dict[str, Any], name: str = "queue_depth") -> dict[str, Any]:
    return {"minReplicas": 1, "maxReplicas": 10, "metrics": [{"type": "External", "external": {
        "metric": {"name": name, "selector": QUEUE}, "target": target}}]}


async def test_a_pods_metric_scales_on_the_agents_pod_series(world: tuple[World, Queues]) -> None:
    w, _ = world
    await w.deployment(2)
    await w.hpa({"minReplicas": 1, "maxReplicas": 10, "metrics": [{"type": "Pods", "pods": {
        "metric": {"name": "pod_cpu_usage_seconds"}, "target": {"type": "AverageValue", "averageValue": "250m"}}}]})
    pod_load(w, 0.5)  # 500m a pod against 250m: ceil(2 * 2) = 4
    hpa = await w.sync()
    assert await w.replicas() == 4
    assert hpa["status"]["currentMetrics"] == [{"type": "Pods", "pods": {
        "metric": {"name": "pod_cpu_usage_seconds"}, "current": {"averageValue": "500m"}}}]
    assert ("web", "Normal", "SuccessfulRescale", "New size: 4; reason: pods metric pod_cpu_usage_seconds above target"
            ) in w.recorded.events
    w.pods(4)
    pod_load(w, 0.125)  # 125m a pod: ceil(4 * 0.5) = 2 (no stabilization window here)
    await w.sync()
    assert await w.replicas() == 2


async def test_a_pods_metric_nobody_serves_is_a_condition(world: tuple[World, Queues]) -> None:
    w, _ = world
    await w.deployment(2)
    await w.hpa({"maxReplicas": 10, "metrics": [{"type": "Pods", "pods": {
        "metric": {"name": "requests_per_second"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]})
    pod_load(w, 0.5)
    hpa = await w.sync()
    status, reason, message = active(hpa)
    assert (status, reason) == ("False", "FailedGetPodsMetric")
    assert "could not find the metric requests_per_second" in message, message
    assert await w.replicas() == 2


async def test_an_external_value_target_scales_on_the_ratio_times_ready_pods(world: tuple[World, Queues]) -> None:
    w, queues = world
    await w.deployment(2)
    queues.values["queue_depth"] = [30_000]
    await w.hpa(external({"type": "Value", "value": "10"}))
    hpa = await w.sync()
    assert queues.queries == [(NS, "queue_depth", "queue=orders")]
    assert await w.replicas() == 4  # ceil(3 * 2) = 6, capped by max(2 * 2, 4) without a behavior
    assert hpa["status"]["currentMetrics"] == [{"type": "External", "external": {
        "metric": {"name": "queue_depth", "selector": QUEUE}, "current": {"value": "30"}}}]
    assert active(hpa)[:2] == ("True", "ValidMetricFound")
    assert any(e[2] == "SuccessfulRescale" and "external metric queue_depth(&LabelSelector{MatchLabels:"
               "map[string]string{queue: orders,}" in e[3] for e in w.recorded.events), w.recorded.events


async def test_an_external_average_value_target_divides_by_the_replicas(world: tuple[World, Queues]) -> None:
    w, queues = world
    await w.deployment(2)
    await status_replicas(w, 2)
    queues.values["queue_depth"] = [20_000, 10_000]  # two series: their sum counts
    await w.hpa(external({"type": "AverageValue", "averageValue": "10"}))
    hpa = await w.sync()
    assert await w.replicas() == 3  # ceil(30 / 10)
    assert hpa["status"]["currentMetrics"][0]["external"]["current"] == {"averageValue": "15"}  # 30 over 2
    queues.values["queue_depth"] = [10_500]  # 3.5 a pod of 3: ceil(10.5 / 10) = 2
    w.pods(3)
    await status_replicas(w, 3)
    w.clock.advance(15.0)  # the next sync a period later
    await w.sync()
    assert await w.replicas() == 2


async def test_external_failures_are_conditions_and_nothing_moves(world: tuple[World, Queues]) -> None:
    w, queues = world
    await w.deployment(2)
    queues.values["queue_depth"] = ExternalMetricError("unable to query Prometheus: connection refused")
    await w.hpa(external({"type": "Value", "value": "10"}))
    hpa = await w.sync()
    status, reason, message = active(hpa)
    assert (status, reason) == ("False", "FailedGetExternalMetric")
    assert "unable to query Prometheus: connection refused" in message, message
    assert await w.replicas() == 2
    queues.values["queue_depth"] = []
    hpa = await w.sync()
    assert "no metrics returned from external metrics API" in active(hpa)[2]


async def test_an_object_value_target_on_a_pod(world: tuple[World, Queues]) -> None:
    w, _ = world
    await w.deployment(2)
    await w.hpa({"minReplicas": 1, "maxReplicas": 10, "metrics": [{"type": "Object", "object": {
        "describedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-1"},
        "metric": {"name": "pod_cpu_usage_seconds"}, "target": {"type": "Value", "value": "250m"}}}]})
    pod_load(w, 0.5)  # web-1 at 500m against 250m: ceil(2 * 2 ready pods) = 4
    hpa = await w.sync()
    assert await w.replicas() == 4
    assert hpa["status"]["currentMetrics"] == [{"type": "Object", "object": {
        "describedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-1"},
        "metric": {"name": "pod_cpu_usage_seconds"}, "current": {"value": "500m"}}}]
    assert active(hpa)[:2] == ("True", "ValidMetricFound")


async def test_an_object_average_value_on_a_node_divides_by_the_replicas(world: tuple[World, Queues]) -> None:
    w, _ = world
    await w.deployment(4)
    await status_replicas(w, 4)
    w.clock.advance(10.0)
    for t in range(3):  # the node's own series: 3 cores
        w.window.add(("node", "n1"), w.clock.wall() - 2 + t, round(3e9 * t), 1 << 30)
    await w.hpa({"minReplicas": 1, "maxReplicas": 10, "metrics": [{"type": "Object", "object": {
        "describedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        "metric": {"name": "node_cpu_usage_seconds"}, "target": {"type": "AverageValue", "averageValue": "500m"}}}]})
    hpa = await w.sync()
    assert active(hpa)[:2] == ("True", "ValidMetricFound"), active(hpa)
    assert hpa["status"]["currentMetrics"][0]["object"]["current"] == {"averageValue": "750m"}  # 3 cores over 4
    assert hpa["status"]["desiredReplicas"] == 6  # ceil(3 / 0.5)
