"""The autoscaling/v2 HorizontalPodAutoscaler spec as typed values: defaults and validation.

Defaults as the API server applies them (pkg/apis/autoscaling/v2/defaults.go): minReplicas 1; no
metrics -> CPU at 80% utilization; a behavior, only when one is given, gets its missing parts from
GenerateHPAScaleUpRules (window 0, Max of {Pods 4, Percent 100} per 15 s) and
GenerateHPAScaleDownRules (Max of {Percent 100 per 15 s}; the window stays unset: the controller
fills in its --horizontal-pod-autoscaler-downscale-stabilization, 300 s).

Validation follows pkg/apis/autoscaling/validation (the parts the controller relies on), with the
API server's `field: Invalid value: ...` wording so a 422 names the field. The scale-to-zero gate
(HPAScaleToZero, alpha) is off, as upstream by default: minReplicas must be at least 1.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import invalid, quote
from nodeagent.core.quantity import Quantity, coerce_quantity

MetricSourceType = Literal["Object", "Pods", "Resource", "ContainerResource", "External"]
TargetType = Literal["Utilization", "Value", "AverageValue"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
PolicyType = Literal["Pods", "Percent"]

METRIC_SOURCE_TYPES: tuple[str, ...] = ("Object", "Pods", "Resource", "ContainerResource", "External")
_SOURCE_FIELD = {
    "Object": "object",
    "Pods": "pods",
    "Resource": "resource",
    "ContainerResource": "containerResource",
    "External": "external",
}
DEFAULT_CPU_UTILIZATION = 80
MAX_STABILIZATION_WINDOW = 3600
MAX_PERIOD_SECONDS = 1800


@dataclass(frozen=True, slots=True)
class MetricTarget:
    type: TargetType
    value: Quantity | None = None
    average_value: Quantity | None = None
    average_utilization: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.value is not None:
            out["value"] = str(self.value)
        if self.average_value is not None:
            out["averageValue"] = str(self.average_value)
        if self.average_utilization is not None:
            out["averageUtilization"] = self.average_utilization
        return out


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One entry of spec.metrics; `name` is the resource name or the metric's name."""

    type: MetricSourceType
    name: str
    target: MetricTarget
    container: str | None = None  # ContainerResource
    selector: Mapping[str, Any] | None = None  # the metric's label selector (Pods, Object, External)
    described_object: Mapping[str, Any] | None = None  # Object


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    type: PolicyType
    value: int
    period_seconds: int


@dataclass(frozen=True, slots=True)
class ScalingRules:
    stabilization_window_seconds: int | None
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None  # KEP-4951: None = the controller's --horizontal-pod-autoscaler-tolerance

    def longest_period(self) -> int:
        return max((p.period_seconds for p in self.policies), default=0)


@dataclass(frozen=True, slots=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


@dataclass(frozen=True, slots=True)
class HPASpec:
    scale_target_ref: Mapping[str, str]
    max_replicas: int
    min_replicas: int = 1
    metrics: tuple[MetricSpec, ...] = field(default_factory=tuple)
    behavior: Behavior | None = None


def default_scale_up_rules() -> ScalingRules:
    return ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))


def default_scale_down_rules() -> ScalingRules:
    return ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15),))


def default_hpa_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object with the API server's defaults filled in (a copy; the input is not changed)."""
    out = copy.deepcopy(dict(obj))
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict):
        return out
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION},
                },
            }
        ]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        for key, default in (("scaleUp", default_scale_up_rules()), ("scaleDown", default_scale_down_rules())):
            rules = behavior.get(key)
            if not isinstance(rules, dict):
                rules = {}
                behavior[key] = rules
            if rules.get("selectPolicy") is None:
                rules["selectPolicy"] = default.select_policy
            if rules.get("policies") is None:
                rules["policies"] = [
                    {"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in default.policies
                ]
            if rules.get("stabilizationWindowSeconds") is None and default.stabilization_window_seconds is not None:
                rules["stabilizationWindowSeconds"] = default.stabilization_window_seconds
    return out


# --- parsing with validation ----------------------------------------------------------------------


def _int(
    value: object,
    path: str,
    errors: list[FieldError],
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    message: str | None = None,
) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError(path, invalid(value, "must be an integer")))
        return None
    if minimum is not None and value < minimum:
        errors.append(FieldError(path, invalid(value, message or f"must be greater than or equal to {minimum}")))
        return None
    if maximum is not None and value > maximum:
        errors.append(FieldError(path, invalid(value, f"must be less than or equal to {maximum}")))
        return None
    return value


def _quantity(value: object, path: str, errors: list[FieldError]) -> Quantity | None:
    try:
        q = coerce_quantity(value)
    except (TypeError, ValueError) as e:
        errors.append(FieldError(path, invalid(value, str(e))))
        return None
    if q.sign() <= 0:
        errors.append(FieldError(path, invalid(str(q), "must be positive")))
        return None
    return q


def _mapping(value: object, path: str, errors: list[FieldError]) -> Mapping[str, Any] | None:
    if value is None:
        errors.append(FieldError(path, "Required value"))
        return None
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, invalid(value, "must be an object")))
        return None
    return value


def _target(raw: object, path: str, errors: list[FieldError], *, allowed: tuple[str, ...]) -> MetricTarget | None:
    t = _mapping(raw, path, errors)
    if t is None:
        return None
    kind = t.get("type")
    if kind not in ("Utilization", "Value", "AverageValue"):
        errors.append(
            FieldError(
                f"{path}.type",
                f'Unsupported value: {quote(kind)}: supported values: "AverageValue", "Utilization", "Value"'
                if kind
                else "Required value: must specify a metric target type",
            )
        )
        return None
    if kind not in allowed:
        errors.append(FieldError(f"{path}.type", invalid(kind, "must be " + " or ".join(allowed))))
        return None
    value = average = None
    utilization = None
    if kind == "Value":
        if t.get("value") is None:
            errors.append(FieldError(f"{path}.value", "Required value: must set either a target value or averageValue"))
            return None
        value = _quantity(t["value"], f"{path}.value", errors)
    elif kind == "AverageValue":
        if t.get("averageValue") is None:
            errors.append(
                FieldError(
                    f"{path}.averageValue",
                    "Required value: must set either a target value for metric or a per-pod target",
                )
            )
            return None
        average = _quantity(t["averageValue"], f"{path}.averageValue", errors)
    else:
        if t.get("averageUtilization") is None:
            errors.append(
                FieldError(
                    f"{path}.averageUtilization",
                    "Required value: must set either a target raw value or a target utilization",
                )
            )
            return None
        utilization = _int(
            t["averageUtilization"], f"{path}.averageUtilization", errors, minimum=1, message="must be greater than 0"
        )
        if utilization is None:
            return None
    if kind != "Utilization" and value is None and average is None:
        return None
    return MetricTarget(kind, value, average, utilization)


def _metric_identifier(raw: object, path: str, errors: list[FieldError]) -> tuple[str, Mapping[str, Any] | None] | None:
    m = _mapping(raw, path, errors)
    if m is None:
        return None
    name = m.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(f"{path}.name", "Required value: must specify a metric name"))
        return None
    selector = m.get("selector")
    if selector is not None and not isinstance(selector, Mapping):
        errors.append(FieldError(f"{path}.selector", invalid(selector, "must be a label selector object")))
        return None
    return name, selector


def _metric(raw: object, path: str, errors: list[FieldError]) -> MetricSpec | None:
    m = _mapping(raw, path, errors)
    if m is None:
        return None
    kind = m.get("type")
    if kind not in METRIC_SOURCE_TYPES:
        if not kind:
            errors.append(FieldError(f"{path}.type", "Required value: must specify a metric source type"))
        else:
            errors.append(
                FieldError(
                    f"{path}.type",
                    f"Unsupported value: {quote(kind)}: supported values: "
                    + ", ".join(quote(t) for t in METRIC_SOURCE_TYPES),
                )
            )
        return None
    populated = [t for t, f in _SOURCE_FIELD.items() if m.get(f) is not None]
    expected = _SOURCE_FIELD[kind]
    if kind not in populated:
        errors.append(
            FieldError(f"{path}.{expected}", "Required value: must populate information for the given metric source")
        )
        return None
    if len(populated) > 1:
        errors.append(FieldError(path, invalid("", "must populate the given metric source only")))
        return None
    src_path = f"{path}.{expected}"
    src = _mapping(m[expected], src_path, errors)
    if src is None:
        return None
    if kind in ("Resource", "ContainerResource"):
        name = src.get("name")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(f"{src_path}.name", "Required value: must specify a resource name"))
            return None
        container = None
        if kind == "ContainerResource":
            container = src.get("container")
            if not isinstance(container, str) or not container:
                errors.append(FieldError(f"{src_path}.container", "Required value: must specify a container"))
                return None
        target = _target(src.get("target"), f"{src_path}.target", errors, allowed=("Utilization", "AverageValue"))
        if target is None:
            return None
        return MetricSpec(kind, name, target, container=container)
    ident = _metric_identifier(src.get("metric"), f"{src_path}.metric", errors)
    if kind == "Pods":
        target = _target(src.get("target"), f"{src_path}.target", errors, allowed=("AverageValue",))
        if ident is None or target is None:
            return None
        return MetricSpec("Pods", ident[0], target, selector=ident[1])
    described = None
    if kind == "Object":
        described = _mapping(src.get("describedObject"), f"{src_path}.describedObject", errors)
        if described is not None:
            for key in ("kind", "name"):
                if not described.get(key):
                    errors.append(FieldError(f"{src_path}.describedObject.{key}", "Required value"))
                    described = None
                    break
    target = _target(src.get("target"), f"{src_path}.target", errors, allowed=("Value", "AverageValue"))
    if ident is None or target is None or (kind == "Object" and described is None):
        return None
    return MetricSpec(kind, ident[0], target, selector=ident[1], described_object=described)


def _rules(raw: object, path: str, errors: list[FieldError], default: ScalingRules) -> ScalingRules | None:
    if raw is None:
        return default
    r = _mapping(raw, path, errors)
    if r is None:
        return None
    window = r.get("stabilizationWindowSeconds")
    if window is None:
        window = default.stabilization_window_seconds
    else:
        window = _int(window, f"{path}.stabilizationWindowSeconds", errors, minimum=0, maximum=MAX_STABILIZATION_WINDOW)
    select = r.get("selectPolicy", default.select_policy) or default.select_policy
    if select not in ("Max", "Min", "Disabled"):
        errors.append(
            FieldError(
                f"{path}.selectPolicy",
                f'Unsupported value: {quote(select)}: supported values: "Disabled", "Max", "Min"',
            )
        )
        return None
    raw_policies = r.get("policies")
    policies: list[ScalingPolicy] = []
    if raw_policies is None:
        policies = list(default.policies)
    elif not isinstance(raw_policies, list) or not raw_policies:
        errors.append(FieldError(f"{path}.policies", "Required value: must specify at least one Policy"))
        return None
    else:
        for i, p in enumerate(raw_policies):
            pp = f"{path}.policies[{i}]"
            pm = _mapping(p, pp, errors)
            if pm is None:
                continue
            ptype = pm.get("type")
            if ptype not in ("Pods", "Percent"):
                errors.append(
                    FieldError(f"{pp}.type", f'Unsupported value: {quote(ptype)}: supported values: "Percent", "Pods"')
                )
                continue
            value = _int(pm.get("value"), f"{pp}.value", errors, minimum=1, message="must be greater than zero")
            period = _int(
                pm.get("periodSeconds"),
                f"{pp}.periodSeconds",
                errors,
                minimum=1,
                maximum=MAX_PERIOD_SECONDS,
                message="must be greater than zero",
            )
            if value is not None and period is not None:
                policies.append(ScalingPolicy(ptype, value, period))
    tolerance = None
    if r.get("tolerance") is not None:
        try:
            q = coerce_quantity(r["tolerance"])
        except (TypeError, ValueError) as e:
            errors.append(FieldError(f"{path}.tolerance", invalid(r["tolerance"], str(e))))
            return None
        if q.sign() < 0:
            errors.append(FieldError(f"{path}.tolerance", invalid(str(q), "must be greater than or equal to 0")))
            return None
        tolerance = float(q.as_fraction())
    return ScalingRules(window, select, tuple(policies), tolerance)


def parse_hpa_spec(spec: object, path: str = "spec") -> HPASpec:
    """Validate and type an autoscaling/v2 spec (defaults applied); ValidationErrors names each field."""
    errors: list[FieldError] = []
    s = _mapping(spec, path, errors)
    if s is None:
        raise ValidationErrors(errors)
    ref = _mapping(s.get("scaleTargetRef"), f"{path}.scaleTargetRef", errors)
    if ref is not None:
        for key in ("kind", "name"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                errors.append(FieldError(f"{path}.scaleTargetRef.{key}", "Required value"))
    min_replicas = s.get("minReplicas")
    if min_replicas is None:
        min_replicas = 1
    else:
        min_replicas = _int(min_replicas, f"{path}.minReplicas", errors, minimum=1)
    max_replicas = _int(s.get("maxReplicas"), f"{path}.maxReplicas", errors, minimum=1)
    if isinstance(min_replicas, int) and isinstance(max_replicas, int) and max_replicas < min_replicas:
        errors.append(
            FieldError(f"{path}.maxReplicas", invalid(max_replicas, "must be greater than or equal to `minReplicas`"))
        )
    raw_metrics = s.get("metrics")
    metrics: list[MetricSpec] = []
    if raw_metrics is None or raw_metrics == []:
        metrics = [
            MetricSpec("Resource", "cpu", MetricTarget("Utilization", average_utilization=DEFAULT_CPU_UTILIZATION))
        ]
    elif not isinstance(raw_metrics, list):
        errors.append(FieldError(f"{path}.metrics", invalid(raw_metrics, "must be a list")))
    else:
        for i, raw in enumerate(raw_metrics):
            m = _metric(raw, f"{path}.metrics[{i}]", errors)
            if m is not None:
                metrics.append(m)
    behavior = None
    raw_behavior = s.get("behavior")
    if raw_behavior is not None:
        b = _mapping(raw_behavior, f"{path}.behavior", errors)
        if b is not None:
            up = _rules(b.get("scaleUp"), f"{path}.behavior.scaleUp", errors, default_scale_up_rules())
            down = _rules(b.get("scaleDown"), f"{path}.behavior.scaleDown", errors, default_scale_down_rules())
            if up is not None and down is not None:
                behavior = Behavior(up, down)
    if errors:
        raise ValidationErrors(errors)
    assert ref is not None and isinstance(min_replicas, int) and isinstance(max_replicas, int)
    return HPASpec(
        {k: str(v) for k, v in ref.items() if k in ("kind", "name", "apiVersion")},
        max_replicas,
        min_replicas,
        tuple(metrics),
        behavior,
    )
