"""The HPA replica calculator on upstream's table cases (replica_calculator_test.go), in our own tables.

Upstream's harness, which the cases assume: pods start "cool" (3 min ago, past a 2 min CPU
initialization period) or "hot" (now); the Ready condition's transition is the pod's start; metric
samples are stamped now with a 30 s window; the readiness delay is 10 s.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.autoscaling.hpa.pods import (
    ContainerInfo,
    MetricError,
    PodInfo,
    PodMetric,
    calculate_requests,
    group_pods,
    pod_info,
    pod_metrics_for_resource,
)
from nodeagent.cluster.autoscaling.hpa.replicas import (
    CalculatorConfig,
    Tolerances,
    external_per_pod_replicas,
    external_replicas,
    object_per_pod_replicas,
    object_replicas,
    plain_metric_replicas,
    raw_resource_replicas,
    resource_replicas,
)

NOW = 10_000.0
COOL = NOW - 180.0
HOT = NOW
CFG = CalculatorConfig(cpu_initialization_period=120.0, delay_of_initial_readiness_status=10.0)
TOL = Tolerances()


def pods(n: int, *, requests: list[str] | None = None, ready: list[str] | None = None, phase: list[str] | None = None,
         start: list[float] | None = None, deleting: list[bool] | None = None, resource: str = "cpu") -> list[PodInfo]:
    out = []
    for i in range(n):
        req = {} if requests is None or i >= len(requests) else {resource: _milli(requests[i])}
        st_ = COOL if start is None else start[i]
        out.append(PodInfo(name=f"pod-{i}", phase="Running" if phase is None else phase[i],
                           deleting=False if deleting is None else deleting[i],
                           ready="True" if ready is None else ready[i], ready_transition=st_, start_time=st_,
                           containers=(ContainerInfo("app", req),)))
    return out


def _milli(q: str) -> int:
    from nodeagent.core.quantity import parse_quantity

    return parse_quantity(q).milli_value()


def levels(*values: int) -> dict[str, PodMetric]:
    return {f"pod-{i}": PodMetric(v, NOW, 30.0) for i, v in enumerate(values)}


R = ["1.0"]


@pytest.mark.parametrize(("case", "current", "pod_kw", "metric", "target", "expected", "util", "raw"), [
    ("scale up", 3, dict(n=3, requests=R * 3), levels(300, 500, 700), 30, 5, 50, 500),
    ("scale up, unready less scale", 3, dict(n=3, requests=R * 3, ready=["False", "True", "True"]),
     levels(300, 500, 700), 30, 4, 60, 600),
    ("scale up, hot cpu less scale", 3, dict(n=3, requests=R * 3, start=[HOT, COOL, COOL]),
     levels(300, 500, 700), 30, 4, 60, 600),
    ("scale up, unready no scale", 3, dict(n=3, requests=R * 3, ready=["True", "False", "False"]),
     levels(400, 500, 700), 30, 3, 40, 400),
    ("scale, hot cpu no scale", 3, dict(n=3, requests=R * 3, ready=["True", "False", "False"], start=[COOL, HOT, HOT]),
     levels(400, 500, 700), 30, 3, 40, 400),
    ("scale up ignores failed pods", 2, dict(n=4, requests=R * 4, ready=["True", "True", "False", "False"],
                                             phase=["Running", "Running", "Failed", "Failed"]),
     levels(500, 700), 30, 4, 60, 600),
    ("scale up ignores pods being deleted", 2, dict(n=4, requests=R * 4, ready=["True", "True", "False", "False"],
                                                    deleting=[False, False, True, True]),
     levels(500, 700), 30, 4, 60, 600),
    ("scale down", 5, dict(n=5, requests=R * 5), levels(100, 300, 500, 250, 250), 50, 3, 28, 280),
    ("scale down includes unready pods", 5, dict(n=5, requests=R * 5, ready=["True"] * 3 + ["False"] * 2),
     levels(100, 300, 500, 250, 250), 50, 2, 30, 300),
    ("scale down excludes unscheduled pods", 5, dict(n=5, requests=R * 5, ready=["True"] + ["False"] * 4,
                                                     phase=["Running"] + ["Pending"] * 4),
     levels(100), 50, 1, 10, 100),
    ("scale down ignores hot cpu pods", 5, dict(n=5, requests=R * 5, start=[COOL] * 3 + [HOT] * 2),
     levels(100, 300, 500, 250, 250), 50, 2, 30, 300),
    ("scale down ignores failed pods", 5, dict(n=7, requests=R * 7, ready=["True"] * 5 + ["False"] * 2,
                                               phase=["Running"] * 5 + ["Failed"] * 2),
     levels(100, 300, 500, 250, 250), 50, 3, 28, 280),
    ("tolerance", 3, dict(n=3, requests=["0.9", "1.0", "1.1"]), levels(1010, 1030, 1020), 100, 3, 102, 1020),
    ("superfluous metrics", 4, dict(n=4, requests=R * 4), levels(4000, 9500, 3000, 7000, 3200, 2000), 100, 24, 587, 5875),
    ("missing metrics", 4, dict(n=4, requests=R * 4), levels(400, 95), 100, 3, 24, 247),
    ("missing metrics, no change (eq)", 2, dict(n=2, requests=R * 2), levels(1000), 100, 2, 100, 1000),
    ("missing metrics, no change (gt)", 2, dict(n=2, requests=R * 2), levels(1900), 100, 2, 190, 1900),
    ("missing metrics, no change (lt)", 2, dict(n=2, requests=R * 2), levels(600), 100, 2, 60, 600),
    ("missing metrics, unready change", 3, dict(n=3, requests=R * 3, ready=["False", "True", "True"]),
     levels(100, 450), 50, 3, 45, 450),
    ("missing metrics, hot cpu no change", 3, dict(n=3, requests=R * 3, start=[HOT, COOL, COOL]),
     levels(100, 450), 50, 3, 45, 450),
    ("missing metrics, unready scale up", 3, dict(n=3, requests=R * 3, ready=["False", "True", "True"]),
     levels(100, 2000), 50, 4, 200, 2000),
    ("missing metrics, hot cpu scale up", 3, dict(n=3, requests=R * 3, ready=["False", "True", "True"],
                                                  start=[HOT, COOL, COOL]),
     levels(100, 2000), 50, 4, 200, 2000),
    ("missing metrics, unready scale down", 4, dict(n=4, requests=R * 4, ready=["False", "True", "True", "True"]),
     levels(100, 100, 100), 50, 3, 10, 100),
    ("rolling update with max surge: a new pod without metrics does not count up", 2, dict(n=3, requests=R * 3),
     levels(100, 100), 50, 2, 10, 100),
])
def test_resource_utilization_table(case: str, current: int, pod_kw: dict[str, Any], metric: dict[str, PodMetric],
                                    target: int, expected: int, util: int, raw: int) -> None:
    got = resource_replicas(current, target, "cpu", TOL, pods(**pod_kw), metric, NOW, CFG)
    assert (got.replicas, got.utilization, got.raw_value) == (expected, util, raw), case
    assert got.timestamp == NOW


def test_missing_pods_on_scale_down_count_as_the_target_when_it_is_above_100_percent() -> None:
    # two pods report 30% of a 150% target; the third reports nothing: it counts as 150%, not 100%
    got = resource_replicas(3, 150, "cpu", TOL, pods(3, requests=R * 3), levels(300, 300), NOW, CFG)
    # first ratio 30/150 = 0.2; recomputed (300+300+1500)/3000 = 70% -> 0.466..; ceil(0.4666 * 3) = 2
    assert got.replicas == 2
    # with 100% the missing pod would give (300+300+1000)/3000 = 53% -> ceil(0.3533*3) = 2 as well; make it show:
    got = resource_replicas(4, 150, "cpu", TOL, pods(4, requests=R * 4), levels(300, 300), NOW, CFG)
    # (600 + 2*1500)/4000 = 90% -> 0.6 -> ceil(2.4) = 3 (with 100%: 65% -> 0.4333 -> ceil(1.73) = 2)
    assert got.replicas == 3


def test_computed_tolerance_regression() -> None:
    """Upstream's TestReplicaCalcComputedToleranceAlgImplementation, recomputed here."""
    start_pods = 10
    used_total = start_pods * 150
    requested_total = 2 * used_total
    per_pod = requested_total // start_pods
    jitter = [100, -100, 10, -10, 2, -2, 1, -1, 0, 0]
    reqs = [f"{per_pod + j}m" for j in jitter]
    metric = levels(*([used_total // 10] * 10))
    target = abs(1 / (2 * (1 - 0.1))) + 0.01
    final_pct = int(target * 100)
    ratio = used_total / (requested_total * target)
    expected = math.ceil(ratio * start_pods)
    got = resource_replicas(start_pods, final_pct, "cpu", TOL, pods(10, requests=reqs), metric, NOW, CFG)
    assert got.replicas == expected == 9
    assert got.utilization == used_total * 100 // requested_total
    # a hair closer to the tolerance: no scaling
    close = int((abs(1 / (2 * (1 - 0.1))) + 0.004) * 100)
    assert resource_replicas(start_pods, close, "cpu", TOL, pods(10, requests=reqs), metric, NOW, CFG).replicas == 10


@pytest.mark.parametrize(("tolerances", "expected"), [
    (Tolerances(), 3),  # 1.08 is within the default 10%
    (Tolerances(scale_up=0.05), 4),  # KEP-4951: a 5% scale-up tolerance reacts
    (Tolerances(scale_down=0.0, scale_up=0.1), 3),
])
def test_per_direction_tolerances(tolerances: Tolerances, expected: int) -> None:
    got = resource_replicas(3, 100, "cpu", tolerances, pods(3, requests=R * 3), levels(1080, 1080, 1080), NOW, CFG)
    assert got.replicas == expected


@pytest.mark.parametrize(("kw", "metric", "message"), [
    (dict(n=3, requests=R * 3), {}, "unable to get metrics for resource cpu: no metrics returned from resource metrics API"),
    (dict(n=1, requests=[]), levels(200), "missing request for cpu in container app of Pod pod-0"),
    (dict(n=1, requests=R), {"an-older-pod-name": PodMetric(100, NOW, 30)}, "no metrics returned matched known pods"),
    (dict(n=2, requests=R * 2, phase=["Pending", "Pending"]), levels(100, 100),
     "did not receive metrics for targeted pods (pods might be unready)"),
    (dict(n=0), levels(100), "no pods returned by selector while calculating replica count"),
])
def test_resource_errors(kw: dict[str, Any], metric: dict[str, PodMetric], message: str) -> None:
    with pytest.raises(MetricError) as e:
        resource_replicas(1, 100, "cpu", TOL, pods(**kw), metric, NOW, CFG)
    assert str(e.value) == message


# --- Pods metrics (custom metrics, plain values) ----------------------------------------------------

@pytest.mark.parametrize(("case", "current", "pod_kw", "metric", "target", "expected", "usage"), [
    ("scale up", 3, dict(n=3), levels(20000, 10000, 30000), 15000, 4, 20000),
    ("unready hot cpu does not reduce a non-CPU scale", 3, dict(n=3, ready=["True", "True", "False"], start=[COOL, COOL, HOT]),
     levels(50000, 10000, 30000), 15000, 6, 30000),
    ("unready hot cpu, would scale down", 3, dict(n=3, ready=["False", "True", "False"], start=[HOT, COOL, HOT]),
     levels(50000, 15000, 30000), 15000, 7, 31666),
    ("scale down", 5, dict(n=5), levels(12000, 12000, 12000, 12000, 12000), 20000, 3, 12000),
    ("tolerance", 3, dict(n=3), levels(20000, 21000, 21000), 20000, 3, 20666),
    ("missing on scale down counts as the target", 3, dict(n=3), levels(5000, 5000), 20000, 2, 5000),
])
def test_pods_metric_table(case: str, current: int, pod_kw: dict[str, Any], metric: dict[str, PodMetric],
                           target: int, expected: int, usage: int) -> None:
    got = plain_metric_replicas(current, target, TOL, pods(**pod_kw), metric, NOW, CFG)
    assert (got.replicas, got.usage) == (expected, usage), case


def test_average_value_on_cpu_uses_cpu_readiness() -> None:
    # raw value 600m average target 300m: 2x; the hot pod counts as unready and as 0 on scale-up
    got = raw_resource_replicas(3, 300, "cpu", TOL, pods(3, start=[HOT, COOL, COOL]), levels(300, 500, 700), NOW, CFG)
    assert got.usage == 600
    assert got.replicas == 4  # (0 + 500 + 700) / 3 = 400 -> 1.33 -> ceil(4.0) = 4
    with pytest.raises(MetricError, match="no metrics returned from resource metrics API"):
        raw_resource_replicas(3, 300, "memory", TOL, pods(3), {}, NOW, CFG)


# --- Object and External ---------------------------------------------------------------------------

@pytest.mark.parametrize(("current", "ready", "usage", "target", "expected"), [
    (3, None, 20000, 15000, 4),
    (3, ["False", "True", "False"], 50000, 10000, 5),  # unready pods are not counted: 5, not 15
    (5, None, 12000, 20000, 3),
    (3, None, 20666, 20000, 3),  # tolerance
    (0, None, 20000, 15000, 2),  # from zero: ceil(ratio), no tolerance (scale-to-zero)
    (0, None, 0, 15000, 0),
])
def test_object_value(current: int, ready: list[str] | None, usage: int, target: int, expected: int) -> None:
    got = object_replicas(current, target, usage, TOL, pods(len(ready) if ready else max(current, 3), ready=ready))
    assert got.replicas == expected and got.usage == usage


@pytest.mark.parametrize(("status", "usage", "target", "expected", "per_pod"), [
    (3, 20000, 5000, 4, 6667),
    (5, 6000, 2000, 3, 1200),
    (4, 20166, 5000, 4, 5042),  # tolerance
])
def test_object_average_value(status: int, usage: int, target: int, expected: int, per_pod: int) -> None:
    got = object_per_pod_replicas(status, target, usage, TOL)
    assert (got.replicas, got.usage) == (expected, per_pod)


@pytest.mark.parametrize(("current", "ready", "values", "target", "expected"), [
    (1, None, [8600], 4400, 2),
    (3, ["False", "True", "False"], [8600], 4400, 2),  # 6 if unready pods counted
    (5, None, [8600], 14334, 3),
    (3, None, [8600], 8888, 3),  # tolerance
    (3, None, [4300, 4300], 4400, 6),  # series are summed
])
def test_external_value(current: int, ready: list[str] | None, values: list[int], target: int, expected: int) -> None:
    n = max(current, 1)
    got = external_replicas(current, target, values, TOL, pods(n if ready is None else len(ready), ready=ready))
    assert got.replicas == expected and got.usage == sum(values)


@pytest.mark.parametrize(("status", "values", "target", "expected", "per_pod"), [
    (3, [8600], 2150, 4, 2867),
    (5, [8600], 2867, 3, 1720),
    (3, [8600], 2900, 3, 2867),  # tolerance
    (2, [2**62, 2**62], 1000, 2**31 - 1, 2**63 - 1),  # capped sums and counts
])
def test_external_average_value(status: int, values: list[int], target: int, expected: int, per_pod: int) -> None:
    got = external_per_pod_replicas(status, target, values, TOL)
    assert (got.replicas, got.usage) == (expected, per_pod)


def test_object_value_needs_pods_to_count_ready_ones() -> None:
    with pytest.raises(MetricError, match="^unable to calculate ready pods: no pods returned by selector"):
        object_replicas(3, 1000, 5000, TOL, [])


# --- group_pods (upstream's TestGroupPods) ----------------------------------------------------------

@pytest.mark.parametrize(("case", "pod", "metric", "resource", "ready", "unready", "missing", "ignored"), [
    ("count in a ready pod - memory", PodInfo("p", phase="Succeeded", ready=None), PodMetric(1, NOW, 60),
     "memory", 1, set(), set(), set()),
    ("unready: no ready condition - CPU", PodInfo("p", phase="Succeeded", ready=None, start_time=NOW), PodMetric(1),
     "cpu", 0, {"p"}, set(), set()),
    ("ready with fresh metrics during initialization - CPU",
     PodInfo("p", phase="Succeeded", ready="True", ready_transition=NOW - 30, start_time=NOW - 60),
     PodMetric(1, NOW, 30), "cpu", 1, set(), set(), set()),
    ("ready without fresh metrics during initialization - CPU",
     PodInfo("p", phase="Succeeded", ready="True", ready_transition=NOW - 30, start_time=NOW - 60),
     PodMetric(1, NOW, 60), "cpu", 0, {"p"}, set(), set()),
    ("unready during initialization - CPU",
     PodInfo("p", phase="Succeeded", ready="False", ready_transition=NOW - 100, start_time=NOW - 60),
     PodMetric(1, NOW, 30), "cpu", 0, {"p"}, set(), set()),
    ("ready after initialization - CPU",
     PodInfo("p", phase="Succeeded", ready="True", ready_transition=NOW - 270, start_time=NOW - 600),
     PodMetric(1, NOW, 30), "cpu", 1, set(), set(), set()),
    ("unready after initialization but has been ready - CPU",
     PodInfo("p", phase="Succeeded", ready="False", ready_transition=NOW - 270, start_time=NOW - 600),
     PodMetric(1, NOW, 30), "cpu", 1, set(), set(), set()),
    ("unready after initialization, never ready - CPU",
     PodInfo("p", phase="Succeeded", ready="False", ready_transition=NOW - 597, start_time=NOW - 600),
     PodMetric(1, NOW, 30), "cpu", 0, {"p"}, set(), set()),
    ("Unknown readiness counts (only False is unready) - CPU",
     PodInfo("p", ready="Unknown", ready_transition=NOW - 597, start_time=NOW - 600),
     PodMetric(1, NOW, 30), "cpu", 1, set(), set(), set()),
    ("a pod without metrics is missing", PodInfo("p"), None, "cpu", 0, set(), {"p"}, set()),
    ("pending pods are unready", PodInfo("p", phase="Pending"), PodMetric(1), "memory", 0, {"p"}, set(), set()),
    ("failed pods are ignored", PodInfo("p", phase="Failed"), PodMetric(1), "memory", 0, set(), set(), {"p"}),
    ("deleted pods are ignored", PodInfo("p", deleting=True), PodMetric(1), "memory", 0, set(), set(), {"p"}),
])
def test_group_pods(case: str, pod: PodInfo, metric: PodMetric | None, resource: str, ready: int,
                    unready: set[str], missing: set[str], ignored: set[str]) -> None:
    metrics = {} if metric is None else {"p": metric}
    g = group_pods([pod], metrics, resource, 300.0, 30.0, NOW)
    assert (g.ready_count, set(g.unready), set(g.missing), set(g.ignored)) == (ready, unready, missing, ignored), case


# --- requests -------------------------------------------------------------------------------------

def test_requests_container_sidecars_and_pod_level() -> None:
    pod = PodInfo("p", containers=(ContainerInfo("app", {"cpu": 500}), ContainerInfo("log", {"cpu": 100})))
    assert calculate_requests([pod], "", "cpu") == {"p": 600}
    assert calculate_requests([pod], "log", "cpu") == {"p": 100}
    with pytest.raises(MetricError, match="^container db not found in Pod p$"):
        calculate_requests([pod], "db", "cpu")
    with pytest.raises(MetricError, match="^missing request for memory in container app of Pod p$"):
        calculate_requests([pod], "", "memory")
    pod_level = PodInfo("q", containers=(ContainerInfo("app", {}),), pod_requests={"cpu": 2000})
    assert calculate_requests([pod_level], "", "cpu") == {"q": 2000}
    with pytest.raises(MetricError, match="^missing pod-level request for memory in Pod q$"):
        calculate_requests([pod_level], "", "memory")
    with pytest.raises(MetricError, match="^missing request for cpu in container app of Pod q$"):
        calculate_requests([pod_level], "app", "cpu")  # a targeted container wins over pod-level requests


def test_pod_info_from_the_api_object() -> None:
    p = pod_info({
        "metadata": {"name": "web-1", "deletionTimestamp": None},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}],
                 "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}},
                                    {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}]},
        "status": {"phase": "Running", "startTime": "2023-11-14T22:13:20Z",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T22:13:30Z"}]}})
    assert p.name == "web-1" and p.phase == "Running" and not p.deleting
    assert p.ready == "True" and p.ready_transition == 1_700_000_010.0 and p.start_time == 1_700_000_000.0
    assert p.containers == (ContainerInfo("app", {"cpu": 250, "memory": 67108864000}), ContainerInfo("proxy", {"cpu": 50}))
    assert p.running_and_ready
    bare = pod_info({"metadata": {"name": "x", "deletionTimestamp": "2023-11-14T22:13:20Z"}})
    assert bare.phase == "Pending" and bare.deleting and bare.ready is None and bare.containers == ()


def test_pod_metrics_for_resource() -> None:
    items = [
        {"metadata": {"name": "a"}, "timestamp": "2023-11-14T22:13:20Z", "window": "30s",
         "containers": [{"name": "app", "usage": {"cpu": "250m", "memory": "1Mi"}},
                        {"name": "log", "usage": {"cpu": "10m", "memory": "1Mi"}}]},
        {"metadata": {"name": "b"}, "containers": [{"name": "app", "usage": {"memory": "1Mi"}}]},  # no cpu: missing
        {"metadata": {"name": "c"}, "containers": [{"name": "log", "usage": {"cpu": "5m"}}]},
    ]
    assert pod_metrics_for_resource(items, "cpu") == {"a": PodMetric(260, 1_700_000_000.0, 30.0), "c": PodMetric(5)}
    assert pod_metrics_for_resource(items, "cpu", "app") == {"a": PodMetric(250, 1_700_000_000.0, 30.0)}
    assert pod_metrics_for_resource(items, "memory") == {
        "a": PodMetric(2 * 1048576000, 1_700_000_000.0, 30.0), "b": PodMetric(1048576000)}


# --- properties ------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4000), min_size=1, max_size=12), st.integers(1, 200), st.integers(1, 40))
def test_ready_pods_only_scale_in_the_direction_of_the_ratio(usages: list[int], target: int, current: int) -> None:
    """With every pod ready and reporting: no change within tolerance, else up above target, down below."""
    n = len(usages)
    got = resource_replicas(current, target, "cpu", TOL, pods(n, requests=R * n), levels(*usages), NOW, CFG)
    ratio = (sum(usages) * 100 // (1000 * n)) / target
    if TOL.within(ratio):
        assert got.replicas == current
    else:
        assert got.replicas == math.ceil(ratio * n)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 4000)), min_size=1, max_size=10), st.integers(10, 200))
def test_missing_metrics_never_flip_the_direction(usages: list[int | None], target: int) -> None:
    """A pod without metrics can damp a change but never turn a scale-up into a scale-down or back.

    (As upstream, the direction is relative to the current count, here the number of pods; the
    calculator may legitimately move away from a current count that differs from the pods listed.)
    """
    n = current = len(usages)
    metric = {f"pod-{i}": PodMetric(u, NOW, 30.0) for i, u in enumerate(usages) if u is not None}
    if not metric:
        return
    got = resource_replicas(current, target, "cpu", TOL, pods(n, requests=R * n), metric, NOW, CFG)
    ratio = (sum(metric[k].value for k in metric) * 100 // (1000 * len(metric))) / target
    if ratio > 1 + TOL.scale_up:
        assert got.replicas >= current
    elif ratio < 1 - TOL.scale_down:
        assert got.replicas <= current
    else:
        assert got.replicas == current
