"""The VPA resource policy applied to recommendations and to pods (vertical-pod-autoscaler/pkg/utils/vpa).

- Which containers get recommendations: all but those whose policy's mode is Off; each reports
  only its controlledResources (default cpu and memory).
- status.recommendation (the recommender's capping post-processor, ApplyVPAPolicy): target,
  lowerBound and upperBound raised to minAllowed and lowered to maxAllowed (a zero bound is no
  bound; maxAllowed falls back to the recommender's global maximum per resource); uncappedTarget is
  the target before that.
- For a pod (the admission controller and the updater, cappingRecommendationProcessor and
  GetContainersResources): the same caps, and with controlledValues RequestsOnly the target is also
  kept at or below the container's current limit; the new requests are the capped target; with
  RequestsAndLimits (the default) the limits move with them, keeping the original limit/request
  ratio (a limit equal to its request stays equal; no original limit, no limit).
Deviation: LimitRange capping (capProportionallyToPodLimitRange, applyContainerLimitRange) is not
applied; admission's own LimitRange defaulting runs on the pod anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.autoscaling.vpa.aggregate import AggregateContainerState
from nodeagent.cluster.autoscaling.vpa.recommender import Estimate, quantity
from nodeagent.cluster.autoscaling.vpa.spec import ContainerPolicy, VPASpec
from nodeagent.core.quantity import MAX_INT64, Quantity, coerce_quantity

ResourceList = dict[str, Quantity]


def recommended_states(
    states: Mapping[str, AggregateContainerState], spec: VPASpec
) -> dict[str, AggregateContainerState]:
    """GetContainerNameToAggregateStateMap: drop the containers whose scaling mode is Off."""
    return {name: s for name, s in states.items() if not spec.scaling_off(name)}


def controlled_resources(spec: VPASpec, names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    return {n: spec.controlled_resources(n) for n in names}


def _cap(
    values: ResourceList, policy: ContainerPolicy | None, global_max: Mapping[str, Quantity]
) -> tuple[ResourceList, list[str]]:
    out = dict(values)
    notes: list[str] = []
    lo = policy.min_allowed if policy is not None else {}
    hi = dict(global_max)
    if policy is not None:
        hi.update(policy.max_allowed)
    for resource in list(out):
        minimum = lo.get(resource)
        if minimum is not None and not minimum.is_zero() and out[resource] < minimum:
            out[resource] = minimum
            notes.append(f"{resource} capped to minAllowed")
        maximum = hi.get(resource)
        if maximum is not None and not maximum.is_zero() and out[resource] > maximum:
            out[resource] = maximum
            notes.append(f"{resource} capped to maxAllowed")
    return out, notes


def _as_list(values: Mapping[str, int]) -> ResourceList:
    return {r: quantity(r, v) for r, v in values.items()}


def _text(values: ResourceList) -> dict[str, str]:
    return {r: str(q) for r, q in sorted(values.items())}


def recommendation_status(
    estimates: Mapping[str, Estimate], spec: VPASpec, global_max: Mapping[str, Quantity] | None = None
) -> dict[str, Any]:
    """status.recommendation: containers sorted by name, bounds capped by the policy."""
    items = []
    for name in sorted(estimates):
        est = estimates[name]
        policy = spec.policy_for(name)
        target = _as_list(est.target)
        capped_target, _ = _cap(target, policy, global_max or {})
        lower, _ = _cap(_as_list(est.lower_bound), policy, global_max or {})
        upper, _ = _cap(_as_list(est.upper_bound), policy, global_max or {})
        items.append(
            {
                "containerName": name,
                "target": _text(capped_target),
                "lowerBound": _text(lower),
                "upperBound": _text(upper),
                "uncappedTarget": _text(target),
            }
        )
    return {"containerRecommendations": items}


# --- pods -----------------------------------------------------------------------------------------


def _parse_list(raw: object) -> ResourceList:
    if not isinstance(raw, Mapping):
        return {}
    out: ResourceList = {}
    for name, value in raw.items():
        try:
            out[str(name)] = coerce_quantity(value)
        except (TypeError, ValueError):
            continue
    return out


def container_requests_and_limits(container: Mapping[str, Any]) -> tuple[ResourceList, ResourceList]:
    resources = container.get("resources") if isinstance(container.get("resources"), Mapping) else {}
    assert isinstance(resources, Mapping)
    return _parse_list(resources.get("requests")), _parse_list(resources.get("limits"))


@dataclass(frozen=True, slots=True)
class ContainerRecommendation:
    """One entry of status.recommendation.containerRecommendations, parsed."""

    container_name: str
    target: ResourceList
    lower_bound: ResourceList = field(default_factory=dict)
    upper_bound: ResourceList = field(default_factory=dict)


def parse_recommendation(recommendation: object) -> dict[str, ContainerRecommendation]:
    """status.recommendation (JSON) as a map by container name; malformed entries are skipped."""
    out: dict[str, ContainerRecommendation] = {}
    items = recommendation.get("containerRecommendations") if isinstance(recommendation, Mapping) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("containerName"), str):
            continue
        out[item["containerName"]] = ContainerRecommendation(
            item["containerName"],
            _parse_list(item.get("target")),
            _parse_list(item.get("lowerBound")),
            _parse_list(item.get("upperBound")),
        )
    return out


def cap_for_pod(
    rec: ContainerRecommendation, container: Mapping[str, Any], spec: VPASpec
) -> tuple[ContainerRecommendation, list[str]]:
    """getCappedRecommendationForContainer: policy caps, and RequestsOnly keeps the target under the limit."""
    policy = spec.policy_for(rec.container_name)
    _, limits = container_requests_and_limits(container)
    requests_only = spec.controlled_values(rec.container_name) == "RequestsOnly"

    def process(values: ResourceList, notes: bool) -> tuple[ResourceList, list[str]]:
        out, annotations = _cap(values, policy, {})
        if requests_only:
            for resource, limit in limits.items():
                if resource in out and out[resource].milli_value() > limit.milli_value():
                    out[resource] = limit
                    annotations.append(f"{resource} capped to container limit")
        return out, annotations if notes else []

    target, notes = process(rec.target, True)
    lower, _ = process(rec.lower_bound, False)
    upper, _ = process(rec.upper_bound, False)
    return ContainerRecommendation(rec.container_name, target, lower, upper), notes


def proportional_limit(
    resource: str, original_limit: Quantity | None, original_request: Quantity | None, recommended: Quantity | None
) -> tuple[Quantity | None, str]:
    """getProportionalResourceLimit: the limit keeping the original limit/request ratio."""
    if original_limit is None or original_limit.value() == 0:
        return None, f"{resource}: limit NOT set since originalLimit is nil or 0"
    if recommended is None or recommended.value() == 0:
        return None, f"{resource}: limit NOT set since recommendedRequest is nil or 0"
    if original_request is None or original_request.value() == 0:
        return recommended, ""
    if original_request.milli_value() == original_limit.milli_value():
        return recommended, ""
    if resource == "cpu":
        scaled = original_limit.milli_value() * recommended.milli_value() // original_request.milli_value()
        if scaled > MAX_INT64:
            return Quantity.from_milli(MAX_INT64, original_limit.format), (
                f"{resource}: failed to keep limit to request ratio; capping limit to int64"
            )
        return Quantity.from_milli(scaled, original_limit.format), ""
    scaled = original_limit.value() * recommended.value() // original_request.value()
    if scaled > MAX_INT64:
        return Quantity.from_value(MAX_INT64, original_limit.format), (
            f"{resource}: failed to keep limit to request ratio; capping limit to int64"
        )
    return Quantity.from_value(scaled, original_limit.format), ""


@dataclass(frozen=True, slots=True)
class NewResources:
    """What a container should get: requests and limits to set (others stay as they are)."""

    container_name: str
    requests: ResourceList
    limits: ResourceList
    annotations: tuple[str, ...] = ()


def pod_resources(pod: Mapping[str, Any], spec: VPASpec, recommendation: object) -> list[NewResources | None]:
    """GetContainersResourcesForPod (addAll false): per container of the pod, in order; None without
    a recommendation for it. Mode Off on the VPA drops the resource policy, as upstream."""
    spec_obj = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec_obj, Mapping)
    containers = [c for c in spec_obj.get("containers") or [] if isinstance(c, Mapping)]
    recs = parse_recommendation(recommendation)
    out: list[NewResources | None] = []
    for c in containers:
        name = str(c.get("name", ""))
        rec = recs.get(name)
        if rec is None:
            out.append(None)
            continue
        capped, notes = cap_for_pod(rec, c, spec)
        requests, limits = container_requests_and_limits(c)
        new_requests = dict(capped.target)
        new_limits: ResourceList = {}
        values = "RequestsAndLimits" if spec.update_mode == "Off" else spec.controlled_values(name)
        if values == "RequestsAndLimits":
            for resource in ("cpu", "memory"):
                limit, note = proportional_limit(
                    resource, limits.get(resource), requests.get(resource), new_requests.get(resource)
                )
                if limit is not None:
                    new_limits[resource] = limit
                if note:
                    notes.append(note)
        out.append(NewResources(name, new_requests, new_limits, tuple(notes)))
    return out
