"""The VPA loops (controllers/manager/vertical.py) over a real in-process registry (memory store, fake
clock): a Deployment's pods created through the registry (so the VPA admission plugin runs) and
marked Running as an agent would, their usage fed to a real SampleWindow as the scrape would
(cumulative CPU counters and working sets every 15 s), the recommender's status and checkpoints,
a restart (a new manager over the same registry), and what the updater does in each mode, through
the real pods/eviction (PodDisruptionBudgets honoured) and a pods/resize the server may not serve.
Upstream's defaults throughout, but the loops' 1 min periods driven by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from nodeagent.cluster.admitters.chain import AdmissionChain
from nodeagent.cluster.autoscaling.hpa.source import container_key
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.manager.client import ApiError
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.timefmt import rfc3339

NS = "default"
VPA = "autoscaling.k8s.io/v1"
MiB = 1 << 20
REQUESTS = {"cpu": "100m", "memory": "100Mi"}


@dataclass
class Recorded:
    events: list[tuple[str, str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["kind"], obj["metadata"]["name"], reason))
        self.messages.append(message)


class Actions:
    """pods/eviction through the registry; pods/resize through the registry too (recorded), or the 404
    a server without the subresource answers (before Kubernetes 1.33)."""

    def __init__(self, client: RegistryClient, serve_resize: bool) -> None:
        self.client, self.serve_resize = client, serve_resize
        self.resized: list[tuple[str, list[dict[str, Any]]]] = []

    async def evict(self, namespace: str, name: str) -> None:
        await self.client.evict(namespace, name)

    async def resize(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> None:
        if not self.serve_resize:
            raise ApiError(404, "NotFound", "the server could not find the requested resource (pods/resize)")
        await self.client.resize(namespace, name, patch)
        self.resized.append((name, [dict(p) for p in patch]))


@dataclass
class World:
    reg: Registry
    clock: FakeClock
    client: RegistryClient
    mgr: ControllerManager
    window: SampleWindow
    recorded: Recorded
    actions: Actions
    counters: dict[str, int] = field(default_factory=dict)

    async def refresh(self) -> None:
        """What the watches would deliver: every informer made current from the registry."""
        for (api_version, kind), informer in self.mgr.informers.items():
            stored = {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o
                      for o in (await self.client.store(api_version, kind).list(None, ListOptions())).items}
            for k in informer.object_keys():
                if k not in stored:
                    gone = informer.get(k)
                    assert gone is not None
                    informer.apply("DELETED", dict(gone))
            for o in stored.values():
                informer.apply("MODIFIED", o)

    async def deployment(self, replicas: int) -> None:
        """The Deployment (the VPA's target, its selector through /scale), its ReplicaSet and pods."""
        template = {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": REQUESTS}}]}}
        await self.client.resource("apps/v1", "Deployment").create(NS, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template}})
        rs = await self.client.resource("apps/v1", "ReplicaSet").create(NS, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template}})
        for i in range(replicas):
            await self.pod(f"web-1-{i}", rs["metadata"]["uid"])
        await self.refresh()

    async def pod(self, name: str, rs_uid: str) -> dict[str, Any]:
        """A pod of the ReplicaSet, created through admission, then Running as its agent reports."""
        created = await self.client.resource("v1", "Pod").create(NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                              "uid": rs_uid, "controller": True}]},
            "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"requests": REQUESTS}}]}})
        long_ago = rfc3339(self.clock.wall() - 13 * 3600)
        created["status"] = {"phase": "Running", "startTime": long_ago,
                             "conditions": [{"type": "Ready", "status": "True"}],
                             "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0}]}
        return await self.client.resource("v1", "Pod").update(NS, created, "status")

    async def vpa(self, mode: str, **spec: Any) -> None:
        await self.client.resource(VPA, "VerticalPodAutoscaler").create(NS, {
            "apiVersion": VPA, "kind": "VerticalPodAutoscaler", "metadata": {"name": "web", "namespace": NS},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "updatePolicy": {"updateMode": mode}, **spec}})
        await self.refresh()

    def load(self, cores: float, memory: int, seconds: int = 60) -> None:
        """`seconds` of usage, a scrape every 15 s, of every pod of the informer."""
        for _ in range(seconds // 15):
            self.clock.advance(15.0)
            for k in self.mgr.informer("v1", "Pod").object_keys():
                pod = k.split("/")[1]
                self.counters[pod] = self.counters.get(pod, 0) + round(cores * 15e9)
                self.window.add(container_key(NS, pod, "web"), self.clock.wall(), self.counters[pod], memory)

    async def recommend(self) -> dict[str, Any]:
        after = await self.mgr.vpa_recommender.sync(f"{NS}/web")
        assert after == 60.0
        await self.refresh()
        return await self.client.resource(VPA, "VerticalPodAutoscaler").get(NS, "web")

    async def update(self) -> None:
        assert await self.mgr.vpa_updater.sync(f"{NS}/web") == 60.0
        await self.refresh()

    async def pods(self) -> dict[str, dict[str, Any]]:
        listed = await self.client.store("v1", "Pod").list(NS, ListOptions())
        return {p["metadata"]["name"]: p for p in listed.items if not p["metadata"].get("deletionTimestamp")}


async def make_world(reg: Registry | None = None, clock: FakeClock | None = None,
                     serve_resize: bool = False) -> World:
    clock = clock or FakeClock()
    if reg is None:
        reg = Registry(MemoryStore(), clock, plugins=plugins(clock))
        reg.plugins.admitter = AdmissionChain(reg)  # as the server installs it: the VPA plugin among them
        await reg.ensure_system_namespaces()
    client = RegistryClient(reg)
    window = SampleWindow(capacity=8, max_gap=20.0)
    recorded = Recorded()
    actions = Actions(client, serve_resize)
    mgr = ControllerManager(client, clock, enabled=["vpa-recommender", "vpa-updater"],
                            recorder=lambda _c: recorded, metrics=window, pod_actions=actions)
    world = World(reg, clock, client, mgr, window, recorded, actions)
    await world.refresh()
    return world


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = await make_world()
    yield w
    await w.reg.close()
    await w.reg.store.close()


def rec(vpa: dict[str, Any]) -> dict[str, Any]:
    items = vpa["status"]["recommendation"]["containerRecommendations"]
    assert [i["containerName"] for i in items] == ["web"]
    out: dict[str, Any] = items[0]
    return out


def q(text: str) -> float:
    return float(parse_quantity(text).milli_value()) / 1000.0


async def test_the_recommendation_converges_and_the_status_says_so(world: World) -> None:
    await world.deployment(2)
    await world.vpa("Off")
    vpa = await world.recommend()  # no samples yet: no recommendation, the condition says False
    assert "recommendation" not in vpa["status"]
    assert {c["type"]: c["status"] for c in vpa["status"]["conditions"]} == {"RecommendationProvided": "False"}
    uppers, lowers = [], []
    for _ in range(30):  # half an hour of 500m and 400 MiB
        world.load(0.5, 400 * MiB)
        vpa = await world.recommend()
        r = rec(vpa)
        uppers.append(q(r["upperBound"]["cpu"]))
        lowers.append(q(r["lowerBound"]["cpu"]))
    assert {c["type"]: c["status"] for c in vpa["status"]["conditions"]} == {"RecommendationProvided": "True"}
    r = rec(vpa)
    # p90: the end of the bucket holding 500m (buckets grow ~5%), plus the 15% margin; memory: the end
    # of the 400 MiB peak's bucket plus 15%
    assert 0.5 * 1.15 <= q(r["target"]["cpu"]) <= 0.5 * 1.1 * 1.15
    assert 400 * MiB * 1.15 <= q(r["target"]["memory"]) <= 400 * MiB * 1.1 * 1.15
    assert r["uncappedTarget"] == r["target"]
    # confidence grows with the samples: the upper bound falls, the lower bound rises, toward the target
    assert uppers == sorted(uppers, reverse=True) and uppers[0] > uppers[-1] > q(r["target"]["cpu"])
    assert lowers == sorted(lowers) and lowers[0] < lowers[-1] < q(r["target"]["cpu"])
    assert vpa["status"]["observedGeneration"] == 1


async def test_resource_policy_caps_and_controlled_resources(world: World) -> None:
    await world.deployment(2)
    await world.vpa("Off", resourcePolicy={"containerPolicies": [
        {"containerName": "*", "maxAllowed": {"cpu": "300m"}, "controlledResources": ["cpu"]}]})
    for _ in range(5):
        world.load(0.5, 400 * MiB)
        vpa = await world.recommend()
    r = rec(vpa)
    assert r["target"] == {"cpu": "300m"} and set(r["uncappedTarget"]) == {"cpu"}
    assert q(r["uncappedTarget"]["cpu"]) >= 0.5 * 1.15
    assert q(r["upperBound"]["cpu"]) == 0.3


async def test_an_oom_kill_bumps_the_memory_recommendation(world: World) -> None:
    await world.deployment(2)
    await world.vpa("Off")
    for _ in range(3):
        world.load(0.1, 150 * MiB)
        before = rec(await world.recommend())
    pod = (await world.pods())["web-1-0"]
    pod["status"]["containerStatuses"][0]["lastState"] = {"terminated": {
        "reason": "OOMKilled", "exitCode": 137, "startedAt": rfc3339(world.clock.wall() - 30),
        "finishedAt": rfc3339(world.clock.wall() - 1)}}
    await world.client.resource("v1", "Pod").update(NS, pod, "status")
    await world.refresh()
    with capture_logs() as logs:
        world.load(0.1, 150 * MiB)
        after = rec(await world.recommend())
        world.load(0.1, 150 * MiB)
        again = rec(await world.recommend())  # the same OOM is counted once
    assert [e["event"] for e in logs if e["event"].startswith("vpa_oom")] == ["vpa_oom_recorded"]
    # the bump: max(used + 100 MiB, used * 1.2), used = max(request 100 Mi, peak 150 Mi) = 250 MiB, +15%
    assert q(after["target"]["memory"]) >= 250 * MiB * 1.15 > q(before["target"]["memory"])
    assert again["target"]["memory"] == after["target"]["memory"]


async def test_checkpoints_survive_a_restart() -> None:
    clock = FakeClock()
    first = await make_world(clock=clock)
    try:
        await first.deployment(2)
        await first.vpa("Off")
        for _ in range(20):
            first.load(0.5, 400 * MiB)
            before = rec(await first.recommend())
        cps = (await first.client.store(VPA, "VerticalPodAutoscalerCheckpoint").list(NS, ListOptions())).items
        assert [(c["metadata"]["name"], c["spec"]) for c in cps] == [
            ("web-web", {"vpaObjectName": "web", "containerName": "web"})]
        assert cps[0]["status"]["totalSamplesCount"] == 40 and cps[0]["status"]["version"] == "v3"
        # a restart: a new manager over the same registry, an empty window (no samples since)
        second = await make_world(first.reg, clock)
        with capture_logs() as logs:
            clock.advance(60)
            after = rec(await second.recommend())
        assert any(e["event"] == "vpa_checkpoints_loaded" for e in logs)
        assert after["target"] == before["target"]
        assert q(after["upperBound"]["cpu"]) == pytest.approx(q(before["upperBound"]["cpu"]), rel=0.02)
        # without the checkpoints, the same restart has nothing to recommend from
        for c in cps:
            await second.client.resource(VPA, "VerticalPodAutoscalerCheckpoint").delete(NS, c["metadata"]["name"])
        third = await make_world(first.reg, clock)
        vpa = await third.mgr.vpa_recommender.sync(f"{NS}/web") and await third.client.resource(
            VPA, "VerticalPodAutoscaler").get(NS, "web")
        assert "recommendation" not in vpa["status"]
    finally:
        await first.reg.close()
        await first.reg.store.close()


async def test_a_deleted_vpa_takes_its_checkpoints(world: World) -> None:
    await world.deployment(2)
    await world.vpa("Off")
    world.load(0.5, 400 * MiB)
    await world.recommend()
    await world.client.resource(VPA, "VerticalPodAutoscaler").delete(NS, "web")
    await world.refresh()
    assert await world.mgr.vpa_recommender.sync(f"{NS}/web") is None
    assert (await world.client.store(VPA, "VerticalPodAutoscalerCheckpoint").list(NS, ListOptions())).items == []


async def recommended(world: World, mode: str) -> dict[str, Any]:
    await world.deployment(2)
    await world.vpa(mode)
    for _ in range(5):
        world.load(0.5, 400 * MiB)
        vpa = await world.recommend()
    return rec(vpa)


async def test_off_recommends_only(world: World) -> None:
    await recommended(world, "Off")
    await world.update()
    pods = await world.pods()
    assert sorted(pods) == ["web-1-0", "web-1-1"]
    assert all(p["spec"]["containers"][0]["resources"]["requests"] == REQUESTS for p in pods.values())
    rs = await world.client.resource("apps/v1", "ReplicaSet").get(NS, "web-1")
    created = await world.pod("web-1-9", rs["metadata"]["uid"])  # admission with Off: requests left alone
    assert created["spec"]["containers"][0]["resources"]["requests"] == REQUESTS
    assert created["metadata"]["annotations"]["vpaObservedContainers"] == "web"
    assert world.recorded.events == []


async def test_initial_sets_requests_at_creation_only(world: World) -> None:
    r = await recommended(world, "Initial")
    await world.update()
    assert sorted(await world.pods()) == ["web-1-0", "web-1-1"]  # running pods are not touched
    rs = await world.client.resource("apps/v1", "ReplicaSet").get(NS, "web-1")
    created = await world.pod("web-1-9", rs["metadata"]["uid"])
    assert created["spec"]["containers"][0]["resources"]["requests"] == r["target"]
    updates = created["metadata"]["annotations"]["vpaUpdates"]  # vpa.admission's note (limits: none to scale)
    assert updates.startswith("Pod resources updated by web: container 0: ")
    assert updates.endswith("cpu request, memory request")


async def test_recreate_evicts_through_the_eviction_subresource(world: World) -> None:
    await recommended(world, "Recreate")
    with capture_logs() as logs:
        await world.update()
    # two replicas, eviction tolerance 0.5: one may be down at a time
    assert len(await world.pods()) == 1
    evicted = [e["pod"] for e in logs if e["event"] == "pod_evicted"]
    assert len(evicted) == 1
    assert ("Pod", evicted[0], "EvictedByVPA") in world.recorded.events
    assert ("VerticalPodAutoscaler", "web", "EvictedPod") in world.recorded.events


async def test_a_pdb_blocks_the_eviction_and_the_pod_stays(world: World) -> None:
    await recommended(world, "Recreate")
    pdb = await world.client.resource("policy/v1", "PodDisruptionBudget").create(NS, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    pdb["status"] = {"observedGeneration": pdb["metadata"]["generation"], "disruptionsAllowed": 0,
                     "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}
    await world.client.resource("policy/v1", "PodDisruptionBudget").update(NS, pdb, "status")
    # the PDB informer left behind (its watch not yet delivered): the eviction API itself refuses
    world.mgr.informer("policy/v1", "PodDisruptionBudget").apply("DELETED", pdb)
    with capture_logs() as logs:
        assert await world.mgr.vpa_updater.sync(f"{NS}/web") == 60.0
    assert [e["code"] for e in logs if e["event"] == "vpa_eviction_refused"] == [429]
    assert sorted(await world.pods()) == ["web-1-0", "web-1-1"]
    # with the budget seen, the updater does not even ask
    await world.refresh()
    with capture_logs() as logs:
        await world.update()
    assert not [e for e in logs if e["event"] in ("vpa_eviction_refused", "pod_evicted")]
    assert sorted(await world.pods()) == ["web-1-0", "web-1-1"]


async def test_in_place_or_recreate_falls_back_to_eviction_without_pods_resize(world: World) -> None:
    await recommended(world, "InPlaceOrRecreate")
    with capture_logs() as logs:
        await world.update()
    assert [e["event"] for e in logs if e["event"] in ("vpa_resize_unavailable", "pod_evicted")] == [
        "vpa_resize_unavailable", "pod_evicted"]
    assert len(await world.pods()) == 1


async def test_in_place_or_recreate_resizes_when_the_server_serves_it() -> None:
    world = await make_world(serve_resize=True)
    try:
        r = await recommended(world, "InPlaceOrRecreate")
        await world.update()
        assert sorted(await world.pods()) == ["web-1-0", "web-1-1"]  # nobody evicted
        assert len(world.actions.resized) == 1  # one at a time (tolerance 0.5 of 2)
        _, patch = world.actions.resized[0]
        assert {op["path"]: op["value"] for op in patch} == {
            "/spec/containers/0/resources/requests/cpu": r["target"]["cpu"],
            "/spec/containers/0/resources/requests/memory": r["target"]["memory"]}
        assert ("VerticalPodAutoscaler", "web", "InPlaceResizedPod") in world.recorded.events
    finally:
        await world.reg.close()
        await world.reg.store.close()


async def test_a_resize_refused_otherwise_is_not_an_eviction(world: World) -> None:
    await recommended(world, "InPlaceOrRecreate")

    async def refuse(namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> None:
        raise ApiError(422, "Invalid", "resize refused")

    world.actions.resize = refuse  # type: ignore[method-assign]
    with capture_logs() as logs:
        await world.update()
    assert [e["code"] for e in logs if e["event"] == "vpa_resize_refused"] == [422]
    assert sorted(await world.pods()) == ["web-1-0", "web-1-1"]


async def test_invalid_vpas_are_refused_naming_the_field(world: World) -> None:
    with pytest.raises(ApiError) as e:
        await world.client.resource(VPA, "VerticalPodAutoscaler").create(NS, {
            "apiVersion": VPA, "kind": "VerticalPodAutoscaler", "metadata": {"name": "bad", "namespace": NS},
            "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "updatePolicy": {"updateMode": "Sometimes"}}})
    assert e.value.code == 422 and "spec.updatePolicy.updateMode" in e.value.message


async def test_an_oom_kept_in_the_checkpoints_is_not_counted_again_after_a_restart() -> None:
    clock = FakeClock()
    first = await make_world(clock=clock)
    try:
        await first.deployment(2)
        await first.vpa("Off")
        first.load(0.1, 150 * MiB)
        await first.recommend()
        pod = (await first.pods())["web-1-0"]
        pod["status"]["containerStatuses"][0]["lastState"] = {"terminated": {
            "reason": "OOMKilled", "exitCode": 137, "startedAt": rfc3339(clock.wall() - 30),
            "finishedAt": rfc3339(clock.wall() - 1)}}
        await first.client.resource("v1", "Pod").update(NS, pod, "status")
        await first.refresh()
        first.load(0.1, 150 * MiB)
        bumped = rec(await first.recommend())  # the OOM recorded, the checkpoint written with it
        second = await make_world(first.reg, clock)  # the pod still shows the same lastState
        with capture_logs() as logs:
            clock.advance(60)
            after = rec(await second.recommend())
        assert not [e for e in logs if e["event"] == "vpa_oom_recorded"]
        assert after["target"]["memory"] == bumped["target"]["memory"]
    finally:
        await first.reg.close()
        await first.reg.store.close()


async def test_a_vpa_naming_another_recommender_is_left_to_it(world: World) -> None:
    await world.deployment(2)
    await world.vpa("Off", recommenders=[{"name": "custom"}])
    world.load(0.5, 400 * MiB)
    vpa = await world.recommend()
    assert "status" not in vpa or not vpa["status"]
    assert (await world.client.store(VPA, "VerticalPodAutoscalerCheckpoint").list(NS, ListOptions())).items == []


async def test_an_hpa_on_cpu_takes_cpu_from_the_vpa_of_the_same_deployment() -> None:
    """coexist wired: the recommender recommends memory only while an HPA scales the Deployment on CPU,
    says so in ConfigUnsupported and warns the VPA and the HPA once; the updater resizes and the
    admission sets memory only, even from a recommendation made before the HPA came; deleting the HPA
    gives CPU back."""
    world = await make_world(serve_resize=True)
    try:
        r = await recommended(world, "InPlaceOrRecreate")
        assert set(r["target"]) == {"cpu", "memory"}
        hpas = world.client.resource("autoscaling/v2", "HorizontalPodAutoscaler")
        await hpas.create(NS, {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web-hpa", "namespace": NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": 5, "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}})
        await world.refresh()
        # a pod the HPA adds, admitted while the recommendation still has cpu: its cpu stays as asked
        rs = await world.client.resource("apps/v1", "ReplicaSet").get(NS, "web-1")
        added = await world.pod("web-1-9", rs["metadata"]["uid"])
        assert added["spec"]["containers"][0]["resources"]["requests"] == {
            "cpu": REQUESTS["cpu"], "memory": r["target"]["memory"]}
        await world.client.resource("v1", "Pod").delete(NS, "web-1-9")
        await world.refresh()
        await world.update()  # the recommendation still has cpu: only memory is applied
        assert world.actions.resized, "the updater resized nobody"
        for _, patch in world.actions.resized:
            assert {op["path"] for op in patch} == {"/spec/containers/0/resources/requests/memory"}, patch
        world.load(0.5, 400 * MiB)
        vpa = await world.recommend()
        assert set(rec(vpa)["target"]) == {"memory"}
        condition = next(c for c in vpa["status"]["conditions"] if c["type"] == "ConfigUnsupported")
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "True", "HorizontalPodAutoscalerOwnsResource",
            "resources scaled by a HorizontalPodAutoscaler are not controlled (web: cpu)")
        warning = ("VerticalPodAutoscaler web and HorizontalPodAutoscaler web-hpa both scale cpu of container web: "
                   "the HPA owns it, the VPA leaves it alone")
        warned = [e for e in world.recorded.events if e[2] == "ResourceOwnedByHPA"]
        assert warned == [("VerticalPodAutoscaler", "web", "ResourceOwnedByHPA"),
                          ("HorizontalPodAutoscaler", "web-hpa", "ResourceOwnedByHPA")], warned
        assert world.recorded.messages.count(warning) == 2  # the same words on both
        world.load(0.5, 400 * MiB)
        await world.recommend()  # the condition stays: no new warning
        assert len([e for e in world.recorded.events if e[2] == "ResourceOwnedByHPA"]) == 2
        await hpas.delete(NS, "web-hpa")
        await world.refresh()
        world.load(0.5, 400 * MiB)
        vpa = await world.recommend()
        assert set(rec(vpa)["target"]) == {"cpu", "memory"}
        assert "ConfigUnsupported" not in {c["type"] for c in vpa["status"]["conditions"]}
    finally:
        await world.reg.close()
        await world.reg.store.close()
