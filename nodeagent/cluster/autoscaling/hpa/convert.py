"""autoscaling/v1 <-> autoscaling/v2 HorizontalPodAutoscaler, as pkg/apis/autoscaling/v1/conversion.go.

`kubectl autoscale` and older clients speak v1, which only has targetCPUUtilizationPercentage and
currentCPUUtilizationPercentage. Everything else of v2 travels in annotations so that a v1 client
that reads and writes an object back loses nothing:
    autoscaling.alpha.kubernetes.io/metrics          the metrics other than CPU utilization (v1 MetricSpec JSON)
    autoscaling.alpha.kubernetes.io/current-metrics  every current metric (v1 MetricStatus JSON)
    autoscaling.alpha.kubernetes.io/behavior         spec.behavior, as Go marshals the *internal* struct
                                                     (no json tags: "ScaleUp", "StabilizationWindowSeconds")
    autoscaling.alpha.kubernetes.io/conditions       status.conditions
They are dropped on the way in (v1 -> v2) and any stale ones are dropped before writing (v2 -> v1).
v1 -> v2 also applies v1's implicit default: no metric at all means CPU at 80%. The API stores v2
and serves v1 by converting; annotations are written compactly in Go's field order.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

METRIC_SPECS_ANNOTATION = "autoscaling.alpha.kubernetes.io/metrics"
METRIC_STATUSES_ANNOTATION = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS_ANNOTATION = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR_ANNOTATION = "autoscaling.alpha.kubernetes.io/behavior"
ROUND_TRIP_ANNOTATIONS = (
    METRIC_SPECS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
)
DEFAULT_CPU_UTILIZATION = 80


def _present(obj: object, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else None


def _or_zero(obj: object, key: str) -> Any:
    """A Go non-pointer Quantity: the zero value marshals as "0"."""
    value = _present(obj, key)
    return "0" if value is None else value


def _ref(ref: object) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": _present(ref, "kind") or "", "name": _present(ref, "name") or ""}
    if _present(ref, "apiVersion"):
        out["apiVersion"] = _present(ref, "apiVersion")
    return out


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _drop_round_trip(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or not any(k in annotations for k in ROUND_TRIP_ANNOTATIONS):
        return
    for key in ROUND_TRIP_ANNOTATIONS:
        annotations.pop(key, None)
    if not annotations and isinstance(meta, dict):
        meta.pop("annotations", None)


def _annotate(obj: dict[str, Any], key: str, value: str) -> None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    annotations[key] = value


def _annotation(obj: Mapping[str, Any], key: str) -> Any:
    raw = _present(_present(obj.get("metadata"), "annotations"), key)
    if not isinstance(raw, str):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None  # upstream fails the conversion; an unreadable annotation is ignored here


def _is_cpu_utilization(metric: object) -> bool:
    return (
        _present(metric, "type") == "Resource"
        and _present(_present(metric, "resource"), "name") == "cpu"
        and _present(_present(_present(metric, "resource"), "target"), "averageUtilization") is not None
    )


def _ident(src: object) -> tuple[Any, Any]:
    metric = _present(src, "metric")
    return _present(metric, "name") or "", _present(metric, "selector")


def metric_spec_to_v1(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if (o := _present(m, "object")) is not None:
        name, selector = _ident(o)
        target = _present(o, "target")
        v: dict[str, Any] = {
            "target": _ref(_present(o, "describedObject")),
            "metricName": name,
            "targetValue": _or_zero(target, "value"),
        }
        if selector is not None:
            v["selector"] = selector
        if _present(target, "averageValue") is not None:
            v["averageValue"] = _present(target, "averageValue")
        out["object"] = v
    if (p := _present(m, "pods")) is not None:
        name, selector = _ident(p)
        v = {"metricName": name, "targetAverageValue": _or_zero(_present(p, "target"), "averageValue")}
        if selector is not None:
            v["selector"] = selector
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if (r := _present(m, key)) is not None:
            target = _present(r, "target")
            v = {"name": _present(r, "name") or ""}
            if _present(target, "averageUtilization") is not None:
                v["targetAverageUtilization"] = _present(target, "averageUtilization")
            if _present(target, "averageValue") is not None:
                v["targetAverageValue"] = _present(target, "averageValue")
            if key == "containerResource":
                v["container"] = _present(r, "container") or ""
            out[key] = v
    if (e := _present(m, "external")) is not None:
        name, selector = _ident(e)
        target = _present(e, "target")
        v = {"metricName": name}
        if selector is not None:
            v["metricSelector"] = selector
        if _present(target, "value") is not None:
            v["targetValue"] = _present(target, "value")
        if _present(target, "averageValue") is not None:
            v["targetAverageValue"] = _present(target, "averageValue")
        out["external"] = v
    return out


def _identifier(src: object, selector_key: str) -> dict[str, Any]:
    ident: dict[str, Any] = {"name": _present(src, "metricName") or ""}
    if _present(src, selector_key) is not None:
        ident["selector"] = _present(src, selector_key)
    return ident


def metric_spec_to_v2(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if (o := _present(m, "object")) is not None:
        target: dict[str, Any] = {
            "type": "Value" if _present(o, "averageValue") is None else "AverageValue",
            "value": _or_zero(o, "targetValue"),
        }
        if _present(o, "averageValue") is not None:
            target["averageValue"] = _present(o, "averageValue")
        out["object"] = {
            "describedObject": _ref(_present(o, "target")),
            "metric": _identifier(o, "selector"),
            "target": target,
        }
    if (p := _present(m, "pods")) is not None:
        out["pods"] = {
            "metric": _identifier(p, "selector"),
            "target": {"type": "AverageValue", "averageValue": _or_zero(p, "targetAverageValue")},
        }
    for key in ("resource", "containerResource"):
        if (r := _present(m, key)) is not None:
            utilization = _present(r, "targetAverageUtilization")
            target = {"type": "AverageValue" if utilization is None else "Utilization"}
            if _present(r, "targetAverageValue") is not None:
                target["averageValue"] = _present(r, "targetAverageValue")
            if utilization is not None:
                target["averageUtilization"] = utilization
            v: dict[str, Any] = {"name": _present(r, "name") or ""}
            if key == "containerResource":
                v["container"] = _present(r, "container") or ""
            v["target"] = target
            out[key] = v
    if (e := _present(m, "external")) is not None:
        target = {"type": "AverageValue" if _present(e, "targetValue") is None else "Value"}
        if _present(e, "targetValue") is not None:
            target["value"] = _present(e, "targetValue")
        if _present(e, "targetAverageValue") is not None:
            target["averageValue"] = _present(e, "targetAverageValue")
        out["external"] = {"metric": _identifier(e, "metricSelector"), "target": target}
    return out


def metric_status_to_v1(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if (o := _present(m, "object")) is not None:
        name, selector = _ident(o)
        current = _present(o, "current")
        v: dict[str, Any] = {
            "target": _ref(_present(o, "describedObject")),
            "metricName": name,
            "currentValue": _or_zero(current, "value"),
        }
        if selector is not None:
            v["selector"] = selector
        if _present(current, "averageValue") is not None:
            v["averageValue"] = _present(current, "averageValue")
        out["object"] = v
    if (p := _present(m, "pods")) is not None:
        name, selector = _ident(p)
        v = {"metricName": name, "currentAverageValue": _or_zero(_present(p, "current"), "averageValue")}
        if selector is not None:
            v["selector"] = selector
        out["pods"] = v
    for key in ("resource", "containerResource"):
        if (r := _present(m, key)) is not None:
            current = _present(r, "current")
            v = {"name": _present(r, "name") or ""}
            if _present(current, "averageUtilization") is not None:
                v["currentAverageUtilization"] = _present(current, "averageUtilization")
            v["currentAverageValue"] = _or_zero(current, "averageValue")
            if key == "containerResource":
                v["container"] = _present(r, "container") or ""
            out[key] = v
    if (e := _present(m, "external")) is not None:
        name, selector = _ident(e)
        current = _present(e, "current")
        v = {"metricName": name}
        if selector is not None:
            v["metricSelector"] = selector
        v["currentValue"] = _or_zero(current, "value")
        if _present(current, "averageValue") is not None:
            v["currentAverageValue"] = _present(current, "averageValue")
        out["external"] = v
    return out


def metric_status_to_v2(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": m.get("type", "")}
    if (o := _present(m, "object")) is not None:
        current: dict[str, Any] = {"value": _or_zero(o, "currentValue")}
        if _present(o, "averageValue") is not None:
            current["averageValue"] = _present(o, "averageValue")
        out["object"] = {
            "metric": _identifier(o, "selector"),
            "current": current,
            "describedObject": _ref(_present(o, "target")),
        }
    if (p := _present(m, "pods")) is not None:
        out["pods"] = {
            "metric": _identifier(p, "selector"),
            "current": {"averageValue": _or_zero(p, "currentAverageValue")},
        }
    for key in ("resource", "containerResource"):
        if (r := _present(m, key)) is not None:
            current = {"averageValue": _or_zero(r, "currentAverageValue")}
            if _present(r, "currentAverageUtilization") is not None:
                current["averageUtilization"] = _present(r, "currentAverageUtilization")
            v: dict[str, Any] = {"name": _present(r, "name") or ""}
            if key == "containerResource":
                v["container"] = _present(r, "container") or ""
            v["current"] = current
            out[key] = v
    if (e := _present(m, "external")) is not None:
        current = {"value": _or_zero(e, "currentValue")}
        if _present(e, "currentAverageValue") is not None:
            current["averageValue"] = _present(e, "currentAverageValue")
        out["external"] = {"metric": _identifier(e, "metricSelector"), "current": current}
    return out


def _rules_to_go(rules: object) -> Any:
    if not isinstance(rules, Mapping):
        return None
    policies = rules.get("policies")
    return {
        "StabilizationWindowSeconds": rules.get("stabilizationWindowSeconds"),
        "SelectPolicy": rules.get("selectPolicy"),
        "Policies": None
        if not isinstance(policies, list)
        else [
            {
                "Type": _present(p, "type") or "",
                "Value": _present(p, "value") or 0,
                "PeriodSeconds": _present(p, "periodSeconds") or 0,
            }
            for p in policies
        ],
        "Tolerance": rules.get("tolerance"),
    }


def _get_ci(obj: object, name: str) -> Any:
    """encoding/json's key match: exact, else case-insensitive."""
    if not isinstance(obj, Mapping):
        return None
    if name in obj:
        return obj[name]
    lower = name.lower()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == lower), None)


def _rules_from_go(raw: object) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    out: dict[str, Any] = {}
    if (w := _get_ci(raw, "StabilizationWindowSeconds")) is not None:
        out["stabilizationWindowSeconds"] = w
    if (s := _get_ci(raw, "SelectPolicy")) is not None:
        out["selectPolicy"] = s
    if isinstance(p := _get_ci(raw, "Policies"), list):
        out["policies"] = [
            {
                "type": _get_ci(x, "Type") or "",
                "value": _get_ci(x, "Value") or 0,
                "periodSeconds": _get_ci(x, "PeriodSeconds") or 0,
            }
            for x in p
        ]
    if (t := _get_ci(raw, "Tolerance")) is not None:
        out["tolerance"] = t
    return out


def hpa_to_v1(v2: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 view of a stored autoscaling/v2 object."""
    out = copy.deepcopy(dict(v2))
    out["apiVersion"] = "autoscaling/v1"
    _drop_round_trip(out)
    in_spec = v2.get("spec") if isinstance(v2.get("spec"), Mapping) else {}
    in_status = v2.get("status") if isinstance(v2.get("status"), Mapping) else {}
    assert isinstance(in_spec, Mapping) and isinstance(in_status, Mapping)
    metrics = [m for m in in_spec.get("metrics") or [] if isinstance(m, Mapping)]

    spec: dict[str, Any] = {"scaleTargetRef": _ref(in_spec.get("scaleTargetRef"))}
    if in_spec.get("minReplicas") is not None:
        spec["minReplicas"] = in_spec["minReplicas"]
    spec["maxReplicas"] = in_spec.get("maxReplicas", 0)
    for m in metrics:  # the first CPU resource metric, with or without a utilization
        if m.get("type") == "Resource" and _present(m.get("resource"), "name") == "cpu":
            utilization = _present(_present(m.get("resource"), "target"), "averageUtilization")
            if utilization is not None:
                spec["targetCPUUtilizationPercentage"] = utilization
            break
    out["spec"] = spec

    status: dict[str, Any] = {}
    for key in ("observedGeneration", "lastScaleTime"):
        if in_status.get(key) is not None:
            status[key] = in_status[key]
    status["currentReplicas"] = in_status.get("currentReplicas", 0)
    status["desiredReplicas"] = in_status.get("desiredReplicas", 0)
    current_metrics = [m for m in in_status.get("currentMetrics") or [] if isinstance(m, Mapping)]
    for m in current_metrics:  # no break upstream: the last CPU utilization wins
        if m.get("type") == "Resource" and _present(m.get("resource"), "name") == "cpu":
            utilization = _present(_present(m.get("resource"), "current"), "averageUtilization")
            if utilization is not None:
                status["currentCPUUtilizationPercentage"] = utilization
    out["status"] = status

    others = [metric_spec_to_v1(m) for m in metrics if not _is_cpu_utilization(m)]
    if others:
        _annotate(out, METRIC_SPECS_ANNOTATION, _json(others))
    if current_metrics:
        _annotate(out, METRIC_STATUSES_ANNOTATION, _json([metric_status_to_v1(m) for m in current_metrics]))
    behavior = in_spec.get("behavior")
    if isinstance(behavior, Mapping):
        _annotate(
            out,
            BEHAVIOR_ANNOTATION,
            _json(
                {"ScaleUp": _rules_to_go(behavior.get("scaleUp")), "ScaleDown": _rules_to_go(behavior.get("scaleDown"))}
            ),
        )
    conditions = in_status.get("conditions")
    if isinstance(conditions, list) and conditions:
        _annotate(out, CONDITIONS_ANNOTATION, _json(conditions))
    return out


def hpa_to_v2(v1: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaling/v2 object an autoscaling/v1 one stands for (v1's defaults applied)."""
    out = copy.deepcopy(dict(v1))
    out["apiVersion"] = "autoscaling/v2"
    in_spec = v1.get("spec") if isinstance(v1.get("spec"), Mapping) else {}
    in_status = v1.get("status") if isinstance(v1.get("status"), Mapping) else {}
    assert isinstance(in_spec, Mapping) and isinstance(in_status, Mapping)

    spec: dict[str, Any] = {
        "scaleTargetRef": _ref(in_spec.get("scaleTargetRef")),
        "minReplicas": in_spec["minReplicas"] if in_spec.get("minReplicas") is not None else 1,
        "maxReplicas": in_spec.get("maxReplicas", 0),
    }
    metrics: list[dict[str, Any]] = []
    if in_spec.get("targetCPUUtilizationPercentage") is not None:
        metrics.append(
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": in_spec["targetCPUUtilizationPercentage"]},
                },
            }
        )
    others = _annotation(v1, METRIC_SPECS_ANNOTATION)
    if isinstance(others, list):
        metrics = [metric_spec_to_v2(m) for m in others if isinstance(m, Mapping)] + metrics  # CPU goes last
    if not metrics:
        metrics = [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION},
                },
            }
        ]
    spec["metrics"] = metrics
    behavior = _annotation(v1, BEHAVIOR_ANNOTATION)
    if isinstance(behavior, Mapping):
        converted = {
            k: r
            for k, raw in (("scaleUp", _get_ci(behavior, "ScaleUp")), ("scaleDown", _get_ci(behavior, "ScaleDown")))
            if (r := _rules_from_go(raw)) is not None
        }
        if converted:
            spec["behavior"] = converted
    out["spec"] = spec

    status: dict[str, Any] = {}
    for key in ("observedGeneration", "lastScaleTime"):
        if in_status.get(key) is not None:
            status[key] = in_status[key]
    status["currentReplicas"] = in_status.get("currentReplicas", 0)
    status["desiredReplicas"] = in_status.get("desiredReplicas", 0)
    if in_status.get("currentCPUUtilizationPercentage") is not None:
        status["currentMetrics"] = [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "current": {"averageUtilization": in_status["currentCPUUtilizationPercentage"]},
                },
            }
        ]
    current = _annotation(v1, METRIC_STATUSES_ANNOTATION)
    if isinstance(current, list):  # "the ones here have more information"
        status["currentMetrics"] = [metric_status_to_v2(m) for m in current if isinstance(m, Mapping)]
    conditions = _annotation(v1, CONDITIONS_ANNOTATION)
    if isinstance(conditions, list):
        status["conditions"] = conditions
    out["status"] = status
    _drop_round_trip(out)
    return out
