"""autoscaling/v2 and autoscaling/v1 HorizontalPodAutoscaler: one stored resource, two served versions.

Stored as autoscaling/v2 (what the controller reads); autoscaling/v1 (`kubectl autoscale` on older
clients, and anything written against v1) is served by converting (autoscaling/hpa/convert.py, which
keeps v2's extra fields in annotations so a v1 read-modify-write loses nothing), as kube-apiserver
does. Defaults and validation are the v2 ones of autoscaling/hpa/spec.py, applied to the v2 form
whatever version was sent, so a 422 names the same fields it names upstream (upstream validates the
internal version, whose paths are v2's: `spec.metrics[0].resource.target.averageUtilization`).
The table is kubectl's: NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nodeagent.cluster.autoscaling.hpa.convert import hpa_to_v1, hpa_to_v2
from nodeagent.cluster.autoscaling.hpa.spec import default_hpa_object, parse_hpa_spec
from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.kinds.workloads import is_int, status_count_errors
from nodeagent.cluster.registry.strategy import Obj, Strategy, get_path
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError, ValidationErrors

GROUP = "autoscaling"
KIND = "HorizontalPodAutoscaler"
PLURAL = "horizontalpodautoscalers"
MAX_SHOWN_METRICS = 2  # formatHPAMetrics shows two, then "+ N more..."


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return "<unknown>" if value is None else str(value)


def _current(statuses: Sequence[Any], i: int, source: str) -> Mapping[str, Any] | None:
    """statuses[i].<source>.current when the status at the same index has that source."""
    if i >= len(statuses) or not isinstance(statuses[i], Mapping):
        return None
    src = statuses[i].get(source)
    if not isinstance(src, Mapping):
        return None
    current = src.get("current")
    return current if isinstance(current, Mapping) else {}


def _one_target(spec: Mapping[str, Any], statuses: Sequence[Any], i: int) -> str:
    kind = spec.get("type")
    key = {"External": "external", "Pods": "pods", "Object": "object", "Resource": "resource",
           "ContainerResource": "containerResource"}.get(str(kind))
    if key is None:
        return "<unknown type>"
    source = _map(spec.get(key))
    target = _map(source.get("target"))
    current = _current(statuses, i, key)
    if key in ("external", "object"):
        if target.get("averageValue") is not None:
            value = None if current is None else current.get("averageValue")
            return f"{_text(value)}/{target['averageValue']} (avg)"
        value = None if current is None else current.get("value")
        return f"{_text(value)}/{target.get('value')}"
    if key == "pods":
        value = None if current is None else current.get("averageValue")
        return f"{_text(value)}/{target.get('averageValue')}"
    name = source.get("name", "")
    if target.get("averageValue") is not None:
        value = None if current is None else current.get("averageValue")
        return f"{name}: {_text(value)}/{target['averageValue']}"
    utilization = None if current is None else current.get("averageUtilization")
    shown = "<unknown>" if utilization is None else f"{utilization}%"
    goal = "<auto>" if target.get("averageUtilization") is None else f"{target['averageUtilization']}%"
    return f"{name}: {shown}/{goal}"


def format_targets(specs: object, statuses: object) -> str:
    """kubectl's TARGETS (formatHPAMetrics): `cpu: 42%/50%`, two at most, then `+ N more...`."""
    if not isinstance(specs, list) or not specs:
        return "<none>"
    shown = statuses if isinstance(statuses, list) else []
    parts = [_one_target(s if isinstance(s, Mapping) else {}, shown, i) for i, s in enumerate(specs)]
    if len(parts) > MAX_SHOWN_METRICS:
        return f"{', '.join(parts[:MAX_SHOWN_METRICS])} + {len(parts) - MAX_SHOWN_METRICS} more..."
    return ", ".join(parts)


class HorizontalPodAutoscalerStrategy(Strategy):
    """autoscaling/v2, the stored version."""

    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v2", KIND, PLURAL, "horizontalpodautoscaler", True, short_names=("hpa",), categories=("all",),
        subresources=(_status(KIND),))
    has_status = True
    generation = True  # metadata.generation, for status.observedGeneration (kubernetes#138228)
    columns = (NAME,
               Column("Reference", description="scaleTargetRef points to the target resource to scale, and is used "
                                               "to the pods for which metrics should be collected, as well as to "
                                               "actually change the replica count."),
               Column("Targets", description="metrics contains the specifications for which to use to calculate "
                                             "the desired replica count."),
               Column("MinPods", description="minReplicas is the lower limit for the number of replicas to which "
                                             "the autoscaler can scale down."),
               Column("MaxPods", type="integer", description="maxReplicas is the upper limit for the number of "
                                                             "replicas to which the autoscaler can scale up."),
               Column("Replicas", type="integer", description="currentReplicas is current number of replicas of "
                                                              "pods managed by this autoscaler, as last seen by the "
                                                              "autoscaler."),
               AGE)

    def initial_status(self, obj: Obj) -> Obj | None:
        return {"desiredReplicas": 0}  # an empty status as v2 serializes it (desiredReplicas has no omitempty)

    def v2(self, obj: Obj) -> Obj:
        """The object in the stored version (a copy when it converts)."""
        return obj

    def default(self, obj: Obj) -> None:
        if isinstance(obj.get("spec"), dict):
            obj["spec"] = default_hpa_object(obj)["spec"]

    def validate(self, obj: Obj) -> list[FieldError]:
        try:
            parse_hpa_spec(self.v2(obj).get("spec"))
        except ValidationErrors as e:
            return list(e.errors)
        return []

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return status_count_errors(new.get("status"), ("currentReplicas", "desiredReplicas"))

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        hpa = self.v2(dict(obj))
        spec = _map(hpa.get("spec"))
        ref = _map(spec.get("scaleTargetRef"))
        min_pods = spec.get("minReplicas")
        max_pods = spec.get("maxReplicas")
        current = get_path(hpa, "status", "currentReplicas")
        return [(hpa.get("metadata") or {}).get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}",
                format_targets(spec.get("metrics"), get_path(hpa, "status", "currentMetrics")),
                "<unset>" if min_pods is None else str(min_pods), max_pods if is_int(max_pods) else 0,
                current if is_int(current) else 0, age(hpa, now_wall)]


class HorizontalPodAutoscalerV1Strategy(HorizontalPodAutoscalerStrategy):
    """autoscaling/v1: the same objects, converted on the way in and out."""

    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, "v1", KIND, PLURAL, "horizontalpodautoscaler", True, short_names=("hpa",), categories=("all",),
        subresources=(_status(KIND),))

    def initial_status(self, obj: Obj) -> Obj | None:
        return {"currentReplicas": 0, "desiredReplicas": 0}  # v1 serializes both

    def v2(self, obj: Obj) -> Obj:
        return hpa_to_v2(obj)

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("minReplicas") is None:
            spec["minReplicas"] = 1  # SetDefaults_HorizontalPodAutoscaler (v1)

    def to_storage(self, obj: Obj) -> Obj:
        return hpa_to_v2(obj)

    def from_storage(self, obj: Obj) -> Obj:
        return hpa_to_v1(obj)
