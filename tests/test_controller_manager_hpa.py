"""The HPA loop (controllers/manager/horizontal.py) over a real in-process registry (memory store, fake
clock): the target's scale read and written through the scale subresource, pods fed to the informer
by hand, their usage fed to a real SampleWindow as the scrape would (cumulative CPU counters of
1 s samples), and the status and events the loop writes. Upstream's defaults throughout (tolerance
0.1, 300 s scale-down stabilization, scale-up capped at max(2x, 4) without a behavior)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.source import container_key
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.manager.client import ApiError
from nodeagent.cluster.controllers.manager.horizontal import HorizontalSettings
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock
from nodeagent.core.timefmt import rfc3339

NS = "default"
TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx", "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "500m"}}}]}}


@dataclass
class Recorded:
    events: list[tuple[str, str, str, str]] = field(default_factory=list)

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], type_, reason, message))


@dataclass
class World:
    """The cluster around one HPA: the Deployment's pods (ready long ago) and their CPU counters."""

    reg: Registry
    clock: FakeClock
    client: RegistryClient
    mgr: ControllerManager
    window: SampleWindow
    recorded: Recorded
    counters: dict[str, int] = field(default_factory=dict)
    serial: int = 0

    async def deployment(self, replicas: int) -> None:
        await self.client.resource("apps/v1", "Deployment").create(NS, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}})
        self.pods(replicas)

    async def hpa(self, spec: dict[str, Any], name: str = "web") -> None:
        obj = await self.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").create(NS, {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, **spec}})
        self.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("ADDED", obj)

    def pods(self, n: int) -> None:
        """What the Deployment's ReplicaSet and the agents would do: n pods, Running and Ready."""
        informer = self.mgr.informer("v1", "Pod")
        current = sorted(informer.object_keys())
        long_ago = rfc3339(self.clock.wall() - 3600)
        while len(current) < n:
            self.serial += 1
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"web-{self.serial}", "namespace": NS, "labels": {"app": "web"}},
                   "spec": TEMPLATE["spec"],
                   "status": {"phase": "Running", "startTime": long_ago,
                              "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": long_ago}]}}
            informer.apply("ADDED", pod)
            current.append(f"{NS}/web-{self.serial}")
        for gone in current[n:]:
            pod = informer.get(gone)
            assert pod is not None
            informer.apply("DELETED", dict(pod))
            self.window.remove(container_key(NS, gone.split("/")[1], "web"))

    def load(self, cores_per_pod: float, seconds: int = 3) -> None:
        """`seconds` of 1 s samples of every pod using `cores_per_pod`."""
        for _ in range(seconds):
            self.clock.advance(1.0)
            for k in self.mgr.informer("v1", "Pod").object_keys():
                pod = k.split("/")[1]
                self.counters[pod] = self.counters.get(pod, 0) + round(cores_per_pod * 1e9)
                self.window.add(container_key(NS, pod, "web"), self.clock.wall(), self.counters[pod], 64 << 20)

    async def sync(self, name: str = "web") -> dict[str, Any]:
        """One sync of the HPA, its status write fed back to the informer; the stored HPA."""
        after = await self.mgr.horizontal.sync(f"{NS}/{name}")
        assert after == self.mgr.horizontal.settings.period  # the next sync a period later, whatever happened
        stored = await self.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").get(NS, name)
        self.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("MODIFIED", stored)
        return stored

    async def replicas(self) -> int:
        scale = await self.client.get_scale("apps/v1", "Deployment", NS, "web")
        value: int = scale["spec"]["replicas"]
        return value


async def make_world(settings: HorizontalSettings, capacity: int, max_gap: float = 2.5) -> World:
    clock = FakeClock()
    reg = Registry(MemoryStore(), clock, plugins=plugins(clock))
    await reg.ensure_system_namespaces()
    client = RegistryClient(reg)
    window = SampleWindow(capacity=capacity, max_gap=max_gap)
    recorded = Recorded()
    mgr = ControllerManager(client, clock, enabled=["horizontalpodautoscaling"], recorder=lambda _c: recorded,
                            metrics=window, hpa=settings)
    assert mgr.horizontal.settings.period == (settings.fast.sync_period if settings.fast else settings.sync_period)
    return World(reg, clock, client, mgr, window, recorded)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = await make_world(HorizontalSettings(metric_window=2.5), 8)
    yield w
    await w.reg.close()
    await w.reg.store.close()


@pytest.fixture
async def fast_world() -> AsyncIterator[World]:
    w = await make_world(HorizontalSettings(fast=FastConfig()), 40)  # 1 s syncs, 30 s steady windows
    yield w
    await w.reg.close()
    await w.reg.store.close()


def conditions(hpa: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in hpa["status"].get("conditions", [])}


CPU50 = {"minReplicas": 1, "maxReplicas": 10,
         "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                       "target": {"type": "Utilization", "averageUtilization": 50}}}]}


async def test_a_cpu_step_scales_up_and_the_status_says_why(world: World) -> None:
    await world.deployment(2)
    await world.hpa(CPU50)
    world.load(0.25)  # 250m of 500m requested: 50%, on target
    hpa = await world.sync()
    assert await world.replicas() == 2
    assert hpa["status"]["currentReplicas"] == 2 and hpa["status"]["desiredReplicas"] == 2
    assert hpa["status"]["currentMetrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "current": {"averageUtilization": 50, "averageValue": "250m"}}}]
    assert conditions(hpa) == {"AbleToScale": ("True", "ReadyForNewScale"),
                               "ScalingActive": ("True", "ValidMetricFound"),
                               "ScalingLimited": ("False", "DesiredWithinRange")}
    assert world.recorded.events == []
    world.load(0.5)  # the step: 100%
    hpa = await world.sync()
    assert await world.replicas() == 4  # ceil(2 * 100 / 50)
    assert hpa["status"]["desiredReplicas"] == 4 and "lastScaleTime" in hpa["status"]
    assert conditions(hpa)["AbleToScale"] == ("True", "SucceededRescale")
    assert world.recorded.events == [("web", "Normal", "SuccessfulRescale", "New size: 4; reason: cpu resource "
                                      "utilization (percentage of request) above target")]
    deployment = await world.client.resource("apps/v1", "Deployment").get(NS, "web")
    assert deployment["metadata"]["generation"] == 2  # a spec change through /scale


async def test_within_tolerance_nothing_moves(world: World) -> None:
    await world.deployment(4)
    await world.hpa(CPU50)
    for usage in (0.27, 0.23, 0.274, 0.226):  # 54%, 46%, 54.8%, 45.2%: ratios inside [0.9, 1.1]
        world.load(usage)
        hpa = await world.sync()
        assert await world.replicas() == 4, usage
        assert hpa["status"]["desiredReplicas"] == 4
    world.load(0.28)  # 56%: ratio 1.12, beyond the tolerance: ceil(4 * 1.12) = 5
    await world.sync()
    assert await world.replicas() == 5


async def test_scale_down_waits_for_the_stabilization_window(world: World) -> None:
    await world.deployment(4)
    await world.hpa(CPU50)
    world.load(0.25)
    await world.sync()  # a recommendation of 4 at t0
    t0 = world.clock.now()
    timeline = []
    while world.clock.now() - t0 < 320:
        world.load(0.05, seconds=15)  # 10%: the calculator asks for 1
        hpa = await world.sync()
        timeline.append((round(world.clock.now() - t0), await world.replicas()))
        if world.clock.now() - t0 < 300:
            assert conditions(hpa)["AbleToScale"] == ("True", "ScaleDownStabilized"), timeline
    assert all(r == 4 for t, r in timeline if t < 300), timeline
    assert timeline[-1][1] == 1, timeline  # once the recommendation of 4 left the 300 s window
    assert world.recorded.events[-1][2:] == ("SuccessfulRescale", "New size: 1; reason: All metrics below target")


async def test_min_and_max_bound_the_decision_and_say_so(world: World) -> None:
    await world.deployment(2)
    await world.hpa({**CPU50, "maxReplicas": 3})
    world.load(1.0)  # 200%: the calculator asks for 8
    hpa = await world.sync()
    assert await world.replicas() == 3
    assert conditions(hpa)["ScalingLimited"] == ("True", "TooManyReplicas")
    limited = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingLimited")
    assert limited["message"] == "the desired replica count is more than the maximum replica count"
    # raising minReplicas above the current count scales up at once, whatever the metrics say
    world.pods(3)
    queue = world.mgr.horizontal.queue
    queue.done(await queue.get())  # the key the HPA's creation queued
    await world.sync()  # its own status write, fed back: no new request
    assert len(queue) == 0
    hpa_obj = await world.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").get(NS, "web")
    hpa_obj["spec"]["minReplicas"] = 5
    hpa_obj["spec"]["maxReplicas"] = 6
    updated = await world.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").update(NS, hpa_obj)
    world.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("MODIFIED", updated)
    assert len(queue) == 1  # a spec change is synced at once
    world.load(0.05)
    await world.sync()
    assert await world.replicas() == 5
    assert world.recorded.events[-1][2:] == ("SuccessfulRescale",
                                             "New size: 5; reason: Current number of replicas below Spec.MinReplicas")


async def test_missing_metrics_and_a_missing_target_are_conditions(world: World) -> None:
    await world.deployment(2)
    await world.hpa(CPU50)
    with capture_logs() as logs:
        hpa = await world.sync()  # no samples at all
        await world.sync()
    assert [e["event"] for e in logs] == ["hpa_sync_error"]  # once while it lasts, not at every sync
    assert conditions(hpa)["ScalingActive"] == ("False", "FailedGetResourceMetric")
    active = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingActive")
    assert "no metrics returned from resource metrics API" in active["message"]
    assert ("web", "Warning", "FailedGetResourceMetric") in [e[:3] for e in world.recorded.events]
    assert await world.replicas() == 2
    await world.hpa({**CPU50, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nope"}},
                    name="lost")
    lost = await world.sync("lost")
    assert conditions(lost)["AbleToScale"] == ("False", "FailedGetScale")
    able = next(c for c in lost["status"]["conditions"] if c["type"] == "AbleToScale")
    assert able["message"] == ('the HPA controller was unable to get the target\'s current scale: '
                               'deployments.apps "nope" not found')
    with pytest.raises(ApiError) as e:
        await world.client.get_scale("v1", "ConfigMap", NS, "x")
    assert e.value.code == 404 and "no scale subresource" in e.value.message


async def test_two_hpas_on_the_same_pods_are_ambiguous(world: World) -> None:
    await world.deployment(2)
    await world.hpa(CPU50)
    await world.hpa(CPU50, name="twin")
    world.load(0.5)
    await world.sync()  # the first one alone: it scales
    assert await world.replicas() == 4
    world.pods(4)
    world.load(0.5)
    twin = await world.sync("twin")
    assert conditions(twin)["ScalingActive"] == ("False", "AmbiguousSelector")
    assert await world.replicas() == 4
    hpas = (await world.reg.resource("autoscaling", "v2", "horizontalpodautoscalers").list(NS, ListOptions())).items
    assert sorted(h["metadata"]["name"] for h in hpas) == ["twin", "web"]


async def run_fast(world: World, trace: list[float]) -> list[tuple[int, int]]:
    """One second of `trace[t]` cores a pod, then a sync, for each t; (t, replicas) at each change."""
    changes: list[tuple[int, int]] = []
    for t, cores in enumerate(trace):
        world.load(cores, seconds=1)
        await world.sync()
        replicas = await world.replicas()
        if not changes or changes[-1][1] != replicas:
            changes.append((t, replicas))
        world.pods(replicas)  # the new pods start at once here; they have no samples yet
    return changes


async def test_fast_mode_reacts_to_a_step_within_five_seconds(fast_world: World) -> None:
    await fast_world.deployment(2)
    await fast_world.hpa(CPU50)
    # 40 s on target, then a 3x step at t = 40: 750m a pod (150%) on 2 pods
    changes = await run_fast(fast_world, [0.25] * 40 + [0.75] * 10)
    print("fast mode, step at t = 40:", changes)
    assert changes[0] == (0, 2)
    first_up = changes[1]
    assert first_up[1] == 6 and 40 < first_up[0] <= 45, changes  # ceil(2 * 150 / 50), within 5 s of the step
    assert fast_world.recorded.events[-1][2] == "SuccessfulRescale"


async def test_fast_mode_ignores_a_two_second_spike(fast_world: World) -> None:
    await fast_world.deployment(2)
    await fast_world.hpa(CPU50)
    changes = await run_fast(fast_world, [0.25] * 40 + [1.0] * 2 + [0.25] * 20)
    assert changes == [(0, 2)], changes  # 4 agreeing seconds are needed; a spike of 2 s never scales


async def test_a_sync_between_two_scrapes_reads_the_last_scraped_rate() -> None:
    """Upstream's defaults: a scrape every 15 s, read over its 17 s rate window back from the latest
    sample (metrics-server's last point), whenever the HPA syncs; a sample older than that is gone."""
    world = await make_world(HorizontalSettings(), 8, max_gap=17.0)  # the scrape's, as the server makes it
    try:
        await world.deployment(2)
        await world.hpa(CPU50)
        world.load(0.5, seconds=15)  # 100%, sampled every second...
        for key in list(world.window.keys()):  # ...but a 15 s scrape keeps only its ends
            first, *_, last = world.window.samples(key)
            world.window.remove(key)
            for t, cpu_ns, mem in (first, last):
                world.window.add(key, t, cpu_ns, mem)
        world.clock.advance(12.0)  # the HPA syncs 12 s after the scrape
        hpa = await world.sync()
        assert await world.replicas() == 4, hpa["status"]
        world.clock.advance(6.0)  # 18 s after the last scrape: no current value
        hpa = await world.sync()
        assert conditions(hpa)["ScalingActive"] == ("False", "FailedGetResourceMetric")
    finally:
        await world.reg.close()
        await world.reg.store.close()
