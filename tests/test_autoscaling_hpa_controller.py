"""One HPA sync: decisions, status (currentMetrics, conditions with upstream's reasons and messages), events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.cluster.autoscaling.hpa.controller import (
    ControllerConfig,
    Event,
    Outcome,
    Scale,
    reconcile,
    rescale_failed,
)
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, MetricError, PodInfo, PodMetric
from nodeagent.core.clock import FakeClock


class Reader:
    """A MetricsReader over fixed values; a value that is an exception is raised."""

    def __init__(self, resource: Mapping[str, Any] | None = None, pods: Mapping[str, Any] | None = None,
                 objects: Mapping[str, Any] | None = None, external: Mapping[str, Any] | None = None) -> None:
        self.resource = resource or {}
        self.pods = pods or {}
        self.objects = objects or {}
        self.external = external or {}

    @staticmethod
    def _get(table: Mapping[str, Any], key: str) -> Any:
        if key not in table:
            raise MetricError("no metrics returned from custom metrics API")
        value = table[key]
        if isinstance(value, Exception):
            raise value
        return value

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]:
        return self._get(self.resource, f"{resource}/{container}") if container else self._get(self.resource, resource)

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]:
        return self._get(self.pods, name)

    def object_metric(self, name: str, described_object: Mapping[str, Any],
                      metric_selector: Mapping[str, Any] | None) -> tuple[int, float]:
        return self._get(self.objects, name)

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]:
        return self._get(self.external, name)


T0 = 1_700_000_000.0


def hpa(metrics: list[dict[str, Any]] | None = None, *, min_replicas: int = 1, max_replicas: int = 10,
        behavior: dict[str, Any] | None = None, status: dict[str, Any] | None = None,
        generation: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                            "minReplicas": min_replicas, "maxReplicas": max_replicas}
    if metrics is not None:
        spec["metrics"] = metrics
    if behavior is not None:
        spec["behavior"] = behavior
    meta: dict[str, Any] = {"name": "web", "namespace": "shop"}
    if generation is not None:
        meta["generation"] = generation
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": meta, "spec": spec, "status": status or {}}


def cpu_metric(utilization: int = 50) -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": utilization}}}


def ready_pods(n: int, cpu_milli: int = 1000) -> list[PodInfo]:
    return [PodInfo(f"web-{i}", ready="True", ready_transition=T0 - 3600, start_time=T0 - 3600,
                    containers=(ContainerInfo("app", {"cpu": cpu_milli, "memory": 256 << 20}),)) for i in range(n)]


def usage(*milli: int, t: float = T0) -> dict[str, PodMetric]:
    return {f"web-{i}": PodMetric(m, t, 30.0) for i, m in enumerate(milli)}


def cond(outcome: Outcome, kind: str) -> dict[str, Any]:
    return next(c for c in outcome.status["conditions"] if c["type"] == kind)


def test_scale_up_on_cpu_sets_status_conditions_and_event() -> None:
    out = reconcile(hpa([cpu_metric(50)]), Scale(3, 3, "app=web"), ready_pods(3), Reader({"cpu": usage(900, 900, 900)}),
                    History(), T0)
    assert out.rescale and out.desired_replicas == 6  # 90% of requests against 50%: ceil(1.8 * 3)
    assert out.events == (Event("Normal", "SuccessfulRescale",
                                "New size: 6; reason: cpu resource utilization (percentage of request) above target"),)
    assert out.status["currentReplicas"] == 3 and out.status["desiredReplicas"] == 6
    assert out.status["lastScaleTime"] == "2023-11-14T22:13:20Z"
    assert out.status["currentMetrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "current": {"averageUtilization": 90, "averageValue": "900m"}}}]
    assert [c["type"] for c in out.status["conditions"]] == ["AbleToScale", "ScalingActive", "ScalingLimited"]
    assert cond(out, "AbleToScale") | {"lastTransitionTime": None} == {
        "type": "AbleToScale", "status": "True", "reason": "SucceededRescale", "lastTransitionTime": None,
        "message": "the HPA controller was able to update the target scale to 6"}
    assert cond(out, "ScalingActive")["message"] == (
        "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)")
    assert (cond(out, "ScalingLimited")["status"], cond(out, "ScalingLimited")["reason"]) == ("False", "DesiredWithinRange")
    assert out.error is None


def test_scale_up_is_capped_to_twice_the_replicas_without_behavior() -> None:
    out = reconcile(hpa([cpu_metric(10)]), Scale(2, 2, "app=web"), ready_pods(2), Reader({"cpu": usage(1000, 1000)}),
                    History(), T0)
    assert out.desired_replicas == 4  # wants 20; max(2 * 2, 4)
    limited = cond(out, "ScalingLimited")
    assert (limited["status"], limited["reason"]) == ("True", "ScaleUpLimit")
    assert limited["message"] == "the desired replica count is increasing faster than the maximum scale rate"


def test_scale_down_waits_for_the_stabilization_window() -> None:
    """Load drops at t0: upstream keeps the highest recommendation of the last 300 s."""
    clock = FakeClock(start=T0, wall_offset=0.0)
    h = History()
    replicas = 6
    timeline = []
    for step in range(40):  # 40 syncs of 15 s = 10 min
        load = 500 if step < 4 else 150  # per pod at 6 pods, of a 1 core request, target 50%
        out = reconcile(hpa([cpu_metric(50)]), Scale(replicas, replicas, "app=web"), ready_pods(replicas),
                        Reader({"cpu": usage(*[load * 6 // replicas] * replicas)}), h, clock.now())
        h = out.history
        if out.rescale:
            timeline.append((clock.now() - T0, replicas, out.desired_replicas))
            replicas = out.desired_replicas
        clock.advance(15)
    # total load 900m -> 2 pods at 50%; the drop is seen at 60 s, the scale-down waits 300 s more
    assert timeline == [(360.0, 6, 2)]


def test_conditions_keep_their_transition_time_until_the_status_changes() -> None:
    first = reconcile(hpa([cpu_metric(50)]), Scale(3, 3, "app=web"), ready_pods(3), Reader({"cpu": usage(500, 500, 500)}),
                      History(), T0)
    assert not first.rescale and cond(first, "AbleToScale")["reason"] == "ReadyForNewScale"
    later = reconcile(hpa([cpu_metric(50)], status=first.status), Scale(3, 3, "app=web"), ready_pods(3),
                      Reader({"cpu": usage(500, 500, 500)}), first.history, T0 + 15)
    assert cond(later, "AbleToScale")["lastTransitionTime"] == cond(first, "AbleToScale")["lastTransitionTime"]
    failing = reconcile(hpa([cpu_metric(50)], status=later.status), Scale(3, 3, "app=web"), ready_pods(3),
                        Reader({"cpu": MetricError("the metrics API is down")}), later.history, T0 + 30)
    active = cond(failing, "ScalingActive")
    assert active["status"] == "False" and active["lastTransitionTime"] == "2023-11-14T22:13:50Z"


def test_all_metrics_invalid() -> None:
    out = reconcile(hpa([cpu_metric(50)]), Scale(3, 3, "app=web"), ready_pods(3),
                    Reader({"cpu": MetricError("the metrics API is down")}), History(), T0)
    assert not out.rescale and out.desired_replicas == 0
    active = cond(out, "ScalingActive")
    assert (active["status"], active["reason"]) == ("False", "FailedGetResourceMetric")
    assert active["message"] == ("the HPA was unable to compute the replica count: failed to get cpu utilization: "
                                 "unable to get metrics for resource cpu: the metrics API is down")
    assert out.events == (
        Event("Warning", "FailedGetResourceMetric",
              "failed to get cpu utilization: unable to get metrics for resource cpu: the metrics API is down"),
        Event("Warning", "FailedComputeMetricsReplicas",
              "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: "
              "failed to get cpu utilization: unable to get metrics for resource cpu: the metrics API is down"))
    assert out.error is not None and out.error.startswith(
        "failed to compute desired number of replicas based on listed metrics for Deployment/shop/web: invalid metrics")
    assert out.status["currentMetrics"] == [{"type": ""}]


def test_one_invalid_metric_still_allows_a_scale_up_but_not_a_scale_down() -> None:
    memory = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}
    reader = Reader({"cpu": usage(900, 900, 900), "memory": MetricError("boom")})
    out = reconcile(hpa([cpu_metric(50), memory]), Scale(3, 3, "app=web"), ready_pods(3), reader, History(), T0)
    assert out.rescale and out.desired_replicas == 6
    assert out.error == ("invalid metrics (1 invalid out of 2), first error is: failed to get memory resource metric value: "
                         "failed to get memory usage: unable to get metrics for resource memory: boom")
    reader = Reader({"cpu": usage(100, 100, 100), "memory": MetricError("boom")})
    out = reconcile(hpa([cpu_metric(50), memory]), Scale(3, 3, "app=web"), ready_pods(3), reader, History(), T0)
    assert not out.rescale
    assert cond(out, "ScalingActive")["reason"] == "FailedGetResourceMetric"


def test_the_highest_proposal_of_several_metrics_wins() -> None:
    qps = {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
    reader = Reader({"cpu": usage(600, 600, 600)}, pods={"qps": usage(40000, 40000, 40000)})
    out = reconcile(hpa([cpu_metric(50), qps]), Scale(3, 3, "app=web"), ready_pods(3), reader, History(), T0)
    assert out.desired_replicas == 6  # cpu says 4 (ceil(1.2*3)), qps says 12, capped at 2x
    assert out.rescale_reason == "pods metric qps above target"
    assert out.status["currentMetrics"][1] == {"type": "Pods", "pods": {"metric": {"name": "qps"},
                                                                       "current": {"averageValue": "40"}}}


def test_object_and_external_metric_statuses_and_names() -> None:
    obj = {"type": "Object", "object": {"describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                                        "metric": {"name": "requests"}, "target": {"type": "Value", "value": "10k"}}}
    ext = {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "jobs"}}},
                                            "target": {"type": "AverageValue", "averageValue": "30"}}}
    reader = Reader(objects={"requests": (20_000_000, T0)}, external={"queue": ([100_000, 50_000], T0)})
    out = reconcile(hpa([obj, ext], max_replicas=20), Scale(3, 3, "app=web"), ready_pods(3), reader, History(), T0)
    assert out.status["currentMetrics"] == [
        {"type": "Object", "object": {"describedObject": obj["object"]["describedObject"], "metric": {"name": "requests"},
                                      "current": {"value": "20k"}}},
        {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "jobs"}}},
                                          "current": {"averageValue": "50"}}}]
    assert out.desired_replicas == 6  # object: ceil(2 * 3) = 6; external: ceil(150 / 30) = 5
    assert out.rescale_reason == "Ingress metric requests above target"


def test_external_metric_error_wording() -> None:
    ext = {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "30"}}}
    out = reconcile(hpa([ext]), Scale(3, 3, "app=web"), ready_pods(3), Reader(external={"queue": MetricError("no such series")}),
                    History(), T0)
    assert cond(out, "ScalingActive")["message"] == (
        "the HPA was unable to compute the replica count: unable to get external metric shop/queue/<nil>: no such series")
    assert "failed to get queue external metric value: failed to get external metric queue: unable to get external metric" in (out.error or "")


@pytest.mark.parametrize(("current", "lo", "hi", "desired", "reason"), [
    (12, 1, 10, 10, "Current number of replicas above Spec.MaxReplicas"),
    (1, 2, 10, 2, "Current number of replicas below Spec.MinReplicas"),
])
def test_out_of_range_replicas_are_brought_back_without_metrics(current: int, lo: int, hi: int, desired: int,
                                                               reason: str) -> None:
    out = reconcile(hpa([cpu_metric()], min_replicas=lo, max_replicas=hi), Scale(current, current, "app=web"),
                    ready_pods(current), Reader(), History(), T0)
    assert (out.rescale, out.desired_replicas, out.rescale_reason) == (True, desired, reason)
    assert "currentMetrics" not in out.status


def test_zero_replicas_disable_scaling() -> None:
    out = reconcile(hpa([cpu_metric()]), Scale(0, 0, "app=web"), [], Reader(), History(), T0)
    assert not out.rescale and out.desired_replicas == 0
    active = cond(out, "ScalingActive")
    assert (active["status"], active["reason"], active["message"]) == (
        "False", "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")


def test_failing_to_get_the_scale() -> None:
    out = reconcile(hpa([cpu_metric()]), None, [], Reader(), History(), T0, scale_error='deployments.apps "web" not found')
    able = cond(out, "AbleToScale")
    assert (able["status"], able["reason"]) == ("False", "FailedGetScale")
    assert able["message"] == 'the HPA controller was unable to get the target\'s current scale: deployments.apps "web" not found'
    assert out.events == (Event("Warning", "FailedGetScale", 'deployments.apps "web" not found'),)
    assert out.error == 'failed to query scale subresource for Deployment/shop/web: deployments.apps "web" not found'


def test_selector_problems() -> None:
    out = reconcile(hpa([cpu_metric()]), Scale(3, 3, ""), ready_pods(3), Reader(), History(), T0)
    active = cond(out, "ScalingActive")
    assert (active["reason"], active["message"]) == ("InvalidSelector", "the HPA target's scale is missing a selector")
    assert out.events[0] == Event("Warning", "SelectorRequired", "selector is required")
    out = reconcile(hpa([cpu_metric()]), Scale(3, 3, "app=web"), ready_pods(3), Reader(), History(), T0,
                    competing_hpas=["shop/web-2"])
    assert cond(out, "ScalingActive")["reason"] == "AmbiguousSelector"
    assert cond(out, "ScalingActive")["message"] == "pods by selector app=web are controlled by multiple HPAs: [shop/web shop/web-2]"


def test_behavior_policies_limit_the_rate_and_remember_events() -> None:
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
                "scaleDown": {"stabilizationWindowSeconds": 0}}
    h = History()
    replicas = 2
    seen = []
    for step in range(6):
        out = reconcile(hpa([cpu_metric(50)], behavior=behavior), Scale(replicas, replicas, "app=web"),
                        ready_pods(replicas), Reader({"cpu": usage(*[2000] * replicas)}), h, T0 + 30 * step)
        h = out.history
        if out.rescale:
            replicas = out.desired_replicas
        seen.append(replicas)
        if step == 1:
            assert cond(out, "ScalingLimited")["reason"] == "ScaleUpLimit"
    assert seen == [3, 3, 4, 4, 5, 5]  # one pod per 60 s


def test_configurable_tolerance_from_behavior() -> None:
    loose = {"scaleUp": {"tolerance": "0.5"}}
    out = reconcile(hpa([cpu_metric(50)], behavior=loose), Scale(3, 3, "app=web"), ready_pods(3),
                    Reader({"cpu": usage(700, 700, 700)}), History(), T0)
    assert not out.rescale  # 1.4 is within a 50% scale-up tolerance
    out = reconcile(hpa([cpu_metric(50)]), Scale(3, 3, "app=web"), ready_pods(3),
                    Reader({"cpu": usage(700, 700, 700)}), History(), T0, ControllerConfig(tolerance=0.1))
    assert out.rescale and out.desired_replicas == 5


def test_rescale_failure_reports_failed_update_scale_and_forgets_the_event() -> None:
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    out = reconcile(hpa([cpu_metric(50)], behavior=behavior), Scale(3, 3, "app=web"), ready_pods(3),
                    Reader({"cpu": usage(900, 900, 900)}), History(), T0)
    assert out.rescale and out.history.scale_up_events
    failed = rescale_failed(out, {}, 3, "the server is shutting down", T0)
    able = cond(failed, "AbleToScale")
    assert (able["status"], able["reason"]) == ("False", "FailedUpdateScale")
    assert able["message"] == "the HPA controller was unable to update the target scale: the server is shutting down"
    assert failed.events[-1] == Event("Warning", "FailedRescale",
                                      "New size: 4; reason: cpu resource utilization (percentage of request) above target; "
                                      "error: the server is shutting down")
    assert failed.history.scale_up_events == ()
    assert "lastScaleTime" not in failed.status


def test_a_stored_spec_that_does_not_parse_is_left_alone() -> None:
    broken = hpa([cpu_metric()])
    broken["spec"]["maxReplicas"] = 0
    out = reconcile(broken, Scale(3, 3, "app=web"), ready_pods(3), Reader(), History(), T0)
    assert not out.rescale and out.error is not None and "spec.maxReplicas" in out.error


def test_observed_generation_is_the_spec_generation_the_status_was_computed_from() -> None:
    """setStatus writes metadata.generation as status.observedGeneration (kubernetes#138228) on every
    path that rebuilds the status; the paths that only touch conditions keep the previous one."""
    scaled = reconcile(hpa([cpu_metric(50)], generation=4), Scale(3, 3, "app=web"), ready_pods(3),
                       Reader({"cpu": usage(900, 900, 900)}), History(), T0)
    assert scaled.status["observedGeneration"] == 4
    steady = reconcile(hpa([cpu_metric(90)], generation=5, status=scaled.status), Scale(3, 3, "app=web"),
                       ready_pods(3), Reader({"cpu": usage(900, 900, 900)}), History(), T0 + 15)
    assert not steady.rescale and steady.status["observedGeneration"] == 5
    no_metrics = reconcile(hpa([cpu_metric()], generation=6), Scale(3, 3, "app=web"), ready_pods(3), Reader(),
                           History(), T0)
    assert no_metrics.error is not None and no_metrics.status["observedGeneration"] == 6
    assert rescale_failed(scaled, {}, 3, "gone", T0).status["observedGeneration"] == 4
    no_scale = reconcile(hpa([cpu_metric()], generation=7, status={"observedGeneration": 2}), None, [], Reader(),
                         History(), T0, scale_error="not found")
    assert no_scale.status["observedGeneration"] == 2
    assert "observedGeneration" not in reconcile(hpa([cpu_metric(50)]), Scale(3, 3, "app=web"), ready_pods(3),
                                                 Reader({"cpu": usage(900, 900, 900)}), History(), T0).status
