"""autoscaling.k8s.io/v1 VerticalPodAutoscaler and VerticalPodAutoscalerCheckpoint, served built in.

Upstream they are CRDs (vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml) checked by the VPA
admission webhook; here the strategy does both: the spec is validated as the webhook does
(autoscaling/vpa/spec.py, a 422 naming the field), status is a subresource (the recommender writes
it), metadata.generation is kept (the CRD's), and the table is the CRD's additionalPrinterColumns:
NAME MODE CPU MEM PROVIDED AGE (the first container's target). Neither CRD defaults a field (an
unset updateMode means Recreate when read, vpa.spec.VPASpec), so nothing is defaulted here either.
Checkpoints (short name vpacheckpoint) hold the recommender's histograms (vpa.aggregate); their CRD
has no status subresource, so the recommender writes them whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.autoscaling.vpa.spec import parse_vpa_spec
from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.strategy import Obj, Strategy, get_path
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import invalid

GROUP = "autoscaling.k8s.io"
VERSION = "v1"
KIND = "VerticalPodAutoscaler"
CHECKPOINT_KIND = "VerticalPodAutoscalerCheckpoint"


def _first_target(obj: Mapping[str, Any], resource: str) -> str:
    items = get_path(obj, "status", "recommendation", "containerRecommendations")
    if not isinstance(items, list) or not items or not isinstance(items[0], Mapping):
        return ""
    target = items[0].get("target")
    value = target.get(resource) if isinstance(target, Mapping) else None
    return "" if value is None else str(value)


def _provided(obj: Mapping[str, Any]) -> str:
    for c in get_path(obj, "status", "conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "RecommendationProvided":
            return str(c.get("status", ""))
    return ""


class VerticalPodAutoscalerStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, VERSION, KIND, "verticalpodautoscalers", "verticalpodautoscaler", True, short_names=("vpa",),
        subresources=(Subresource("status", KIND, ("get", "patch", "update")),))
    has_status = True
    generation = True
    columns = (NAME,
               Column("Mode", description=".spec.updatePolicy.updateMode"),
               Column("CPU", description=".status.recommendation.containerRecommendations[0].target.cpu"),
               Column("Mem", description=".status.recommendation.containerRecommendations[0].target.memory"),
               Column("Provided", description=".status.conditions[?(@.type=='RecommendationProvided')].status"),
               AGE)

    def validate(self, obj: Obj) -> list[FieldError]:
        try:
            parse_vpa_spec(obj.get("spec"))
        except ValidationErrors as e:
            return list(e.errors)
        return []

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        status = new.get("status")
        if status is not None and not isinstance(status, Mapping):
            return [FieldError("status", invalid(status, "must be an object"))]
        return []

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        mode = get_path(obj, "spec", "updatePolicy", "updateMode")
        return [(obj.get("metadata") or {}).get("name", ""), "" if mode is None else str(mode),
                _first_target(obj, "cpu"), _first_target(obj, "memory"), _provided(obj), age(obj, now_wall)]


class VerticalPodAutoscalerCheckpointStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        GROUP, VERSION, CHECKPOINT_KIND, "verticalpodautoscalercheckpoints", "verticalpodautoscalercheckpoint", True,
        short_names=("vpacheckpoint",))  # no status subresource (the CRD has none): written whole

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if spec is None:
            return []
        if not isinstance(spec, Mapping):
            return [FieldError("spec", invalid(spec, "must be an object"))]
        return [FieldError(f"spec.{f}", invalid(spec[f], "must be a string"))
                for f in ("vpaObjectName", "containerName") if f in spec and not isinstance(spec[f], str)]
