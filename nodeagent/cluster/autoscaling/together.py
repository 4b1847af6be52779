"""HPA on CPU and VPA on memory on one Deployment, simulated: replicas and memory requests settle.

The world (15 s steps): total CPU demand D(t) is shared by the pods; each pod's working set is a
fixed part plus a part that grows with the CPU it serves (caches, connections), so the memory a pod
needs depends on how many pods the HPA runs. Through the real code:
- HPA: hpa.controller.reconcile every 15 s on CPU utilization (target 50%, upstream defaults);
- VPA: every 60 s each pod's usage goes into vpa.aggregate ContainerStates, vpa.recommender and
  vpa.policy give status.recommendation, vpa.updater plans InPlaceOrRecreate, and resize.decide
  (the agent) accepts the resizes in place; new pods are admitted with vpa.admission;
- the resources each one controls come from coexist.resolve, unless `ignore_ownership` lets the
  VPA control CPU too (the misconfiguration the rule exists for).
The VPA's time constants are shortened (1 h memory intervals and half-lives, confidence over 1 h,
the updater's 12 h lifetime threshold at 1 h) so hours of simulated time show what days would.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from nodeagent.cluster.autoscaling.coexist import effective_spec, resolve
from nodeagent.cluster.autoscaling.hpa.controller import Scale, reconcile
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.hpa.spec import parse_hpa_spec
from nodeagent.cluster.autoscaling.resize import Node, Resources, decide
from nodeagent.cluster.autoscaling.vpa.admission import admit
from nodeagent.cluster.autoscaling.vpa.aggregate import MIB, AggregateContainerState, AggregationsConfig, ContainerState
from nodeagent.cluster.autoscaling.vpa.policy import recommendation_status, recommended_states
from nodeagent.cluster.autoscaling.vpa.recommender import RecommenderConfig, recommend
from nodeagent.cluster.autoscaling.vpa.spec import parse_vpa_spec
from nodeagent.cluster.autoscaling.vpa.updater import UpdaterConfig, apply_patch, plan
from nodeagent.core.quantity import coerce_quantity
from nodeagent.core.timefmt import rfc3339

EPOCH = 1_700_006_400.0
STEP = 15.0
HOUR = 3600.0
VPA_CONFIG = AggregationsConfig(memory_interval=HOUR, cpu_half_life=HOUR, memory_half_life=HOUR)
RECOMMENDER = RecommenderConfig(confidence_interval_cpu=HOUR, confidence_interval_memory=HOUR)
UPDATER = UpdaterConfig(pod_lifetime_threshold=HOUR)


@dataclass(slots=True)
class _Pod:
    obj: dict[str, Any]
    state: ContainerState
    created: float

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    def request(self, resource: str) -> int:
        raw = self.obj["spec"]["containers"][0].get("resources", {}).get("requests", {}).get(resource)
        if raw is None:
            return 0
        q = coerce_quantity(raw)
        return q.milli_value() if resource == "cpu" else q.value()


@dataclass(frozen=True, slots=True)
class Result:
    replicas: tuple[int, ...]  # per 15 s step
    memory_requests: tuple[int, ...]  # mean memory request of the pods, bytes, per step
    cpu_requests: tuple[int, ...]  # mean CPU request, millicores, per step
    warnings: tuple[str, ...]
    resizes: int
    evictions: int

    @staticmethod
    def _reversals(series: tuple[int, ...], tolerance: float = 0.0) -> int:
        direction, last, count = 0, series[0], 0
        for v in series[1:]:
            if abs(v - last) <= tolerance * max(1, abs(last)):
                continue
            d = 1 if v > last else -1
            if direction and d != direction:
                count += 1
            direction, last = d, v
        return count

    def replica_flaps(self) -> int:
        return self._reversals(self.replicas)

    def changes_between(self, start_s: float, end_s: float) -> tuple[int, int]:
        """(replica changes, memory request changes) between two times (seconds since the start)."""
        a, b = int(start_s / STEP), int(end_s / STEP)
        reps = self.replicas[a:b]
        mems = self.memory_requests[a:b]
        return (
            sum(1 for x, y in pairwise(reps) if x != y),
            sum(1 for x, y in pairwise(mems) if x != y),
        )

    def memory_reversals(self, tolerance: float = 0.05) -> int:
        """Direction changes of the mean memory request beyond `tolerance` (relative)."""
        return self._reversals(self.memory_requests, tolerance)


class _Reader:
    def __init__(self, values: Mapping[str, PodMetric]) -> None:
        self.values = values

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]:
        return self.values

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]:
        raise MetricError("none")

    def object_metric(
        self, name: str, described_object: Mapping[str, Any], metric_selector: Mapping[str, Any] | None
    ) -> tuple[int, float]:
        raise MetricError("none")

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]:
        raise MetricError("none")


HPA = {
    "metadata": {"name": "web", "namespace": "shop"},
    "status": {},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 2,
        "maxReplicas": 40,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
            }
        ],
    },
}
VPA = {
    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
    "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
    "resourcePolicy": {"containerPolicies": [{"containerName": "*", "controlledValues": "RequestsAndLimits"}]},
}


def run(
    demand: Callable[[float], float],
    hours: float,
    *,
    seed: int = 0,
    memory_base: int = 200 * MIB,
    memory_per_core: int = 400 * MIB,
    ignore_ownership: bool = False,
) -> Result:
    rng = random.Random(seed)
    hpa_obj = {**HPA, "status": {}}
    hpa_spec = parse_hpa_spec(hpa_obj["spec"])
    vpa_spec = parse_vpa_spec(VPA)
    resolution = resolve(vpa_spec, "web", [("shop/web", hpa_spec)], ["app"])
    controlled = {"app": ("cpu", "memory")} if ignore_ownership else dict(resolution.controlled)
    aggregate = AggregateContainerState(VPA_CONFIG, EPOCH)
    node = Node(allocatable_cpu=64_000, allocatable_memory=256 << 30)
    recommendation: dict[str, Any] = {}
    pods: list[_Pod] = []
    serial = 0

    def new_pod(now: float) -> _Pod:
        nonlocal serial
        obj: dict[str, Any] = {
            "metadata": {
                "name": f"web-{serial}",
                "namespace": "shop",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}
                ],
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                    }
                ]
            },
            "status": {"phase": "Running", "startTime": rfc3339(now), "qosClass": "Burstable"},
        }
        serial += 1
        if recommendation:
            obj = admit(obj, "web", vpa_spec_effective, recommendation).pod
        return _Pod(obj, ContainerState(aggregate), now)

    vpa_spec_effective = vpa_spec if ignore_ownership else effective_spec(vpa_spec, resolution)
    history = History()
    replicas_series: list[int] = []
    mem_series: list[int] = []
    cpu_series: list[int] = []
    resizes = evictions = 0
    replicas = max(2, math.ceil(demand(0) / 0.5))
    for _ in range(replicas):
        pods.append(new_pod(EPOCH - 2 * HOUR))
    steps = int(hours * HOUR / STEP)
    for step in range(steps):
        now = EPOCH + step * STEP
        share = demand(step * STEP) / len(pods)
        usage = {p.name: max(0.0, share * (1 + rng.gauss(0, 0.05))) for p in pods}
        # HPA
        infos = [
            PodInfo(
                p.name,
                ready="True",
                ready_transition=p.created,
                start_time=p.created,
                containers=(ContainerInfo("app", {"cpu": p.request("cpu")}),),
            )
            for p in pods
        ]
        metrics = {n: PodMetric(round(u * 1000), now, STEP) for n, u in usage.items()}
        out = reconcile(hpa_obj, Scale(replicas, len(pods), "app=web"), infos, _Reader(metrics), history, now)
        history = out.history
        hpa_obj["status"] = out.status
        if out.rescale:
            replicas = out.desired_replicas
            while len(pods) < replicas:
                pods.append(new_pod(now))
            del pods[replicas:]
        # VPA, once a minute
        if step % 4 == 0:
            for p in pods:
                working_set = memory_base + int(memory_per_core * usage.get(p.name, share))
                p.state.add_cpu_sample(round(usage.get(p.name, share) * 1000), now)
                p.state.add_memory_sample(working_set, now)
            states = recommended_states({"app": aggregate}, vpa_spec_effective)
            estimates = recommend(states, RECOMMENDER, controlled)
            recommendation = recommendation_status(estimates, vpa_spec_effective)
            decisions = plan(vpa_spec_effective, recommendation, [p.obj for p in pods], now, UPDATER)
            for d, p in zip(decisions.decisions, list(pods), strict=True):
                if d.action == "resize":
                    resized = apply_patch(p.obj, d.patch)
                    verdict = decide(_resources(resized), _resources(p.obj), node, [])
                    if verdict.outcome == "accepted":
                        p.obj = resized
                        resizes += 1
                elif d.action == "evict":
                    evictions += 1
                    pods[pods.index(p)] = new_pod(now)
        replicas_series.append(len(pods))
        mem_series.append(sum(p.request("memory") for p in pods) // len(pods))
        cpu_series.append(sum(p.request("cpu") for p in pods) // len(pods))
    return Result(tuple(replicas_series), tuple(mem_series), tuple(cpu_series), resolution.warnings, resizes, evictions)


def _resources(obj: Mapping[str, Any]) -> list[Resources]:
    out = []
    for c in obj["spec"]["containers"]:
        res = c.get("resources", {})

        def parse(raw: Mapping[str, Any]) -> dict[str, int]:
            values = {}
            for r, v in raw.items():
                q = coerce_quantity(v)
                values[r] = q.milli_value() if r == "cpu" else q.value()
            return values

        out.append(Resources(c["name"], parse(res.get("requests", {})), parse(res.get("limits", {}))))
    return out


@dataclass(frozen=True, slots=True)
class Phases:
    """A demand trace: a list of (start second, cores)."""

    steps: tuple[tuple[float, float], ...] = field(default_factory=tuple)

    def __call__(self, t: float) -> float:
        level = self.steps[0][1]
        for start, cores in self.steps:
            if t >= start:
                level = cores
        return level
