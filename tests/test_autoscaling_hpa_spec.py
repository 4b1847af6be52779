"""HPA spec defaults and validation (422 wording naming the field), and autoscaling/v1 <-> v2 conversion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.autoscaling.hpa.convert import (
    BEHAVIOR_ANNOTATION,
    CONDITIONS_ANNOTATION,
    METRIC_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    hpa_to_v1,
    hpa_to_v2,
)
from nodeagent.cluster.autoscaling.hpa.spec import (
    Behavior,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
    default_hpa_object,
    parse_hpa_spec,
)
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.quantity import parse_quantity

REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}


def test_defaults() -> None:
    spec = parse_hpa_spec({"scaleTargetRef": REF, "maxReplicas": 5})
    assert spec.min_replicas == 1
    assert [(m.type, m.name, m.target) for m in spec.metrics] == [
        ("Resource", "cpu", MetricTarget("Utilization", average_utilization=80))]
    assert spec.behavior is None
    spec = parse_hpa_spec({"scaleTargetRef": REF, "maxReplicas": 5, "behavior": {"scaleDown": {"selectPolicy": "Min"}}})
    assert spec.behavior == Behavior(
        ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))),
        ScalingRules(None, "Min", (ScalingPolicy("Percent", 100, 15),)))


def test_default_hpa_object_fills_what_the_api_server_fills() -> None:
    obj = {"spec": {"scaleTargetRef": REF, "maxReplicas": 5, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 10}}}}
    out = default_hpa_object(obj)
    assert out["spec"]["minReplicas"] == 1
    assert out["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    assert out["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 10, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}
    assert "minReplicas" not in obj["spec"]  # not changed in place
    assert "behavior" not in default_hpa_object({"spec": {"maxReplicas": 1}})["spec"]


def test_every_metric_source_parses() -> None:
    spec = parse_hpa_spec({"scaleTargetRef": REF, "maxReplicas": 9, "metrics": [
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "200Mi"}}},
        {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                                                            "target": {"type": "Utilization", "averageUtilization": 60}}},
        {"type": "Pods", "pods": {"metric": {"name": "qps", "selector": {"matchLabels": {"a": "b"}}},
                                  "target": {"type": "AverageValue", "averageValue": "1k"}}},
        {"type": "Object", "object": {"describedObject": {"kind": "Ingress", "name": "main"}, "metric": {"name": "rps"},
                                      "target": {"type": "Value", "value": "10k"}}},
        {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "AverageValue", "averageValue": 30}}},
    ]})
    m = spec.metrics
    assert m[0].target.average_value == parse_quantity("200Mi")
    assert (m[1].container, m[1].target.average_utilization) == ("app", 60)
    assert m[2].selector == {"matchLabels": {"a": "b"}}
    assert m[3].described_object == {"kind": "Ingress", "name": "main"} and m[3].target.value == parse_quantity("10k")
    assert m[4].target.average_value == parse_quantity("30")


@pytest.mark.parametrize(("spec", "errors"), [
    ({"maxReplicas": 5}, ["spec.scaleTargetRef: Required value"]),
    ({"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 5}, ["spec.scaleTargetRef.name: Required value"]),
    ({"scaleTargetRef": REF, "maxReplicas": 0}, ["spec.maxReplicas: Invalid value: 0: must be greater than or equal to 1"]),
    ({"scaleTargetRef": REF, "minReplicas": 0, "maxReplicas": 3},
     ["spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"]),
    ({"scaleTargetRef": REF, "minReplicas": 4, "maxReplicas": 3},
     ["spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"]),
    ({"scaleTargetRef": REF, "maxReplicas": "3"}, ["spec.maxReplicas: Invalid value: \"3\": must be an integer"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "metrics": [{"type": "Cpu"}]},
     ['spec.metrics[0].type: Unsupported value: "Cpu": supported values: "Object", "Pods", "Resource", "ContainerResource", "External"']),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "metrics": [{"type": "Resource"}]},
     ["spec.metrics[0].resource: Required value: must populate information for the given metric source"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 0}}}]},
     ["spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {
        "type": "Value", "value": "1"}}}]},
     ['spec.metrics[0].pods.target.type: Invalid value: "Value": must be AverageValue']),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "metrics": [{"type": "External", "external": {"metric": {"name": "q"}, "target": {
        "type": "Value", "value": "-1"}}}]},
     ['spec.metrics[0].external.target.value: Invalid value: "-1": must be positive']),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}}},
     ["spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 3601: must be less than or equal to 3600"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "behavior": {"scaleDown": {"policies": []}}},
     ["spec.behavior.scaleDown.policies: Required value: must specify at least one Policy"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "behavior": {"scaleDown": {"policies": [
        {"type": "Percent", "value": 0, "periodSeconds": 1801}]}}},
     ["spec.behavior.scaleDown.policies[0].value: Invalid value: 0: must be greater than zero",
      "spec.behavior.scaleDown.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800"]),
    ({"scaleTargetRef": REF, "maxReplicas": 3, "behavior": {"scaleUp": {"selectPolicy": "Fast"}}},
     ['spec.behavior.scaleUp.selectPolicy: Unsupported value: "Fast": supported values: "Disabled", "Max", "Min"']),
    ("nope", ['spec: Invalid value: "nope": must be an object']),
])
def test_validation_names_the_field(spec: Any, errors: list[str]) -> None:
    with pytest.raises(ValidationErrors) as e:
        parse_hpa_spec(spec)
    assert [str(x) for x in e.value.errors] == errors


def test_tolerance_parses_as_a_quantity() -> None:
    spec = parse_hpa_spec({"scaleTargetRef": REF, "maxReplicas": 3, "behavior": {"scaleUp": {"tolerance": "50m"}}})
    assert spec.behavior is not None and spec.behavior.scale_up.tolerance == 0.05


# --- conversion -----------------------------------------------------------------------------------

def v2(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": REF, "minReplicas": 2, "maxReplicas": 5, **spec}, "status": {
                "currentReplicas": 3, "desiredReplicas": 3}}


def test_kubectl_autoscale_v1_body_becomes_a_cpu_metric() -> None:
    body = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": REF, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}}
    out = hpa_to_v2(body)
    assert out["apiVersion"] == "autoscaling/v2"
    assert out["spec"] == {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5, "metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}
    no_target = hpa_to_v2({"spec": {"scaleTargetRef": REF, "maxReplicas": 5}})
    assert no_target["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80  # v1's implicit default


def test_the_cpu_metric_is_the_percentage_and_nothing_is_annotated() -> None:
    obj = v2(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 55}}}])
    obj["status"]["currentMetrics"] = [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40, "averageValue": "400m"}}}]
    one = hpa_to_v1(obj)
    assert one["apiVersion"] == "autoscaling/v1"
    assert one["spec"] == {"scaleTargetRef": REF, "minReplicas": 2, "maxReplicas": 5, "targetCPUUtilizationPercentage": 55}
    assert one["status"] == {"currentReplicas": 3, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 40}
    assert json.loads(one["metadata"]["annotations"][METRIC_STATUSES_ANNOTATION]) == [
        {"type": "Resource", "resource": {"name": "cpu", "currentAverageUtilization": 40, "currentAverageValue": "400m"}}]
    back = hpa_to_v2(one)
    assert back["spec"] == obj["spec"] and back["status"] == obj["status"]
    assert "annotations" not in back["metadata"]


def test_everything_else_round_trips_through_annotations() -> None:
    metrics = [
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 60}}},
        {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                                                            "target": {"type": "AverageValue", "averageValue": "300m"}}},
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
        {"type": "Object", "object": {"describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                                      "metric": {"name": "rps", "selector": {"matchLabels": {"a": "b"}}},
                                      "target": {"type": "Value", "value": "10k"}}},
        {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "30"}}},
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
    ]
    behavior = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}], "tolerance": "50m"},
                "scaleDown": {"selectPolicy": "Disabled", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}
    obj = v2(metrics=metrics, behavior=behavior)
    obj["metadata"]["annotations"] = {"team": "shop", METRIC_SPECS_ANNOTATION: "stale"}
    obj["status"]["conditions"] = [{"type": "AbleToScale", "status": "True", "lastTransitionTime": "2023-11-14T22:13:20Z",
                                    "reason": "ReadyForNewScale", "message": "recommended size matches current size"}]
    one = hpa_to_v1(obj)
    ann = one["metadata"]["annotations"]
    assert ann["team"] == "shop"
    assert one["spec"]["targetCPUUtilizationPercentage"] == 70
    assert json.loads(ann[METRIC_SPECS_ANNOTATION])[0] == {"type": "Resource", "resource": {"name": "memory", "targetAverageUtilization": 60}}
    assert json.loads(ann[METRIC_SPECS_ANNOTATION])[3] == {"type": "Object", "object": {
        "target": {"kind": "Ingress", "name": "main", "apiVersion": "networking.k8s.io/v1"}, "metricName": "rps",
        "targetValue": "10k", "selector": {"matchLabels": {"a": "b"}}}}
    assert json.loads(ann[BEHAVIOR_ANNOTATION]) == {  # Go field names: the internal struct has no json tags
        "ScaleUp": {"StabilizationWindowSeconds": 0, "SelectPolicy": "Max",
                    "Policies": [{"Type": "Pods", "Value": 4, "PeriodSeconds": 15}], "Tolerance": "50m"},
        "ScaleDown": {"StabilizationWindowSeconds": None, "SelectPolicy": "Disabled",
                      "Policies": [{"Type": "Percent", "Value": 100, "PeriodSeconds": 15}], "Tolerance": None}}
    assert json.loads(ann[CONDITIONS_ANNOTATION]) == obj["status"]["conditions"]
    back = hpa_to_v2(one)
    assert back["spec"]["metrics"] == metrics  # the CPU utilization comes back last, as it was here
    assert back["spec"]["behavior"] == behavior
    assert back["status"]["conditions"] == obj["status"]["conditions"]
    assert back["metadata"]["annotations"] == {"team": "shop"}


def test_object_average_value_round_trip_is_upstreams() -> None:
    """v1's ObjectMetricSource has a non-pointer targetValue: an AverageValue target comes back with value "0"."""
    metrics = [{"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"}, "metric": {"name": "m"},
                                             "target": {"type": "AverageValue", "averageValue": "5"}}}]
    back = hpa_to_v2(hpa_to_v1(v2(metrics=metrics)))
    assert back["spec"]["metrics"][0]["object"]["target"] == {"type": "AverageValue", "value": "0", "averageValue": "5"}


def test_behavior_annotation_keys_are_matched_case_insensitively_like_encoding_json() -> None:
    one = {"apiVersion": "autoscaling/v1", "metadata": {"annotations": {
        BEHAVIOR_ANNOTATION: '{"scaleup":{"stabilizationwindowseconds":30,"POLICIES":[{"type":"Pods","value":2,"periodseconds":60}]}}'}},
        "spec": {"scaleTargetRef": REF, "maxReplicas": 3}}
    assert hpa_to_v2(one)["spec"]["behavior"] == {"scaleUp": {"stabilizationWindowSeconds": 30, "policies": [
        {"type": "Pods", "value": 2, "periodSeconds": 60}]}}


def test_unreadable_annotations_are_ignored() -> None:
    one = {"apiVersion": "autoscaling/v1", "metadata": {"annotations": {METRIC_SPECS_ANNOTATION: "{not json"}},
           "spec": {"scaleTargetRef": REF, "maxReplicas": 3, "targetCPUUtilizationPercentage": 50}}
    out = hpa_to_v2(one)
    assert out["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 50
    assert "annotations" not in out["metadata"]


quantity = st.sampled_from(["1", "250m", "1k", "64Mi", "30"])
name = st.sampled_from(["qps", "rps", "queue"])
metric_strategy = st.one_of(
    st.builds(lambda r, u: {"type": "Resource", "resource": {"name": r, "target": {"type": "Utilization", "averageUtilization": u}}},
              st.sampled_from(["cpu", "memory"]), st.integers(1, 200)),
    st.builds(lambda r, q: {"type": "Resource", "resource": {"name": r, "target": {"type": "AverageValue", "averageValue": q}}},
              st.sampled_from(["cpu", "memory"]), quantity),
    st.builds(lambda n, q: {"type": "Pods", "pods": {"metric": {"name": n}, "target": {"type": "AverageValue", "averageValue": q}}},
              name, quantity),
    st.builds(lambda n, q: {"type": "External", "external": {"metric": {"name": n}, "target": {"type": "Value", "value": q}}},
              name, quantity),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(metric_strategy, min_size=1, max_size=5))
def test_v2_v1_v2_keeps_the_metrics(metrics: list[dict[str, Any]]) -> None:
    """Round trip: the metrics come back, the first CPU utilization moved to the end (upstream's order)."""
    back = hpa_to_v2(hpa_to_v1(v2(metrics=metrics)))["spec"]["metrics"]
    first_cpu = next((m for m in metrics if m["type"] == "Resource" and m["resource"]["name"] == "cpu"), None)
    if first_cpu is not None and "averageUtilization" in first_cpu["resource"]["target"]:
        expected = [m for m in metrics if not (m["type"] == "Resource" and m["resource"]["name"] == "cpu"
                                              and "averageUtilization" in m["resource"]["target"])] + [first_cpu]
    else:
        expected = [m for m in metrics if not (m["type"] == "Resource" and m["resource"]["name"] == "cpu"
                                              and "averageUtilization" in m["resource"]["target"])]
    assert back == (expected or [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}])
