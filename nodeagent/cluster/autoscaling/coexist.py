"""HPA and VPA on the same workload: each resource has one owner.

An HPA that scales on a resource's utilization (a Resource or ContainerResource metric on cpu or
memory) reads usage / requests; a VPA that moves those requests moves the HPA's input, and the two
chase each other (a VPA raising CPU requests lowers utilization, the HPA removes pods, usage per
pod rises, the VPA raises requests again...). The article's combination avoids it by splitting the
resources: HPA on CPU, VPA on memory. Upstream only documents this ("don't use the VPA with the
HPA on the same resource metric") and warns.

The rule here: an HPA owns the resources it scales on, for the workload it targets. A VPA on the
same workload (same kind, name and API group in its targetRef) keeps controlling everything else:
- a Resource metric on cpu/memory takes that resource away from every container;
- a ContainerResource metric takes it away from that container only;
- Pods, Object and External metrics take nothing (the recommended way to use both on CPU is an HPA
  on a custom metric such as requests per second).
When a user configures both on CPU, the objects are accepted (refusing either would make the result
of `kubectl apply` depend on the order the two arrive in), both get a warning naming the other,
the VPA's status gets a ConfigUnsupported condition saying which resources it leaves alone, and the
recommender and updater act on the effective controlled resources. Removing the HPA gives the
resource back to the VPA at the next recommendation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.cluster.autoscaling.hpa.spec import HPASpec
from nodeagent.cluster.autoscaling.vpa.spec import DEFAULT_CONTAINER, ContainerPolicy, VPASpec

RESOURCES = ("cpu", "memory")
CONDITION = "ConfigUnsupported"


def _group(api_version: str | None) -> str:
    if not api_version:
        return ""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def same_target(hpa: HPASpec, vpa: VPASpec) -> bool:
    a, b = hpa.scale_target_ref, vpa.target_ref
    return (
        a.get("kind") == b.get("kind")
        and a.get("name") == b.get("name")
        and _group(a.get("apiVersion")) == _group(b.get("apiVersion"))
    )


def owned_by_hpa(hpa: HPASpec) -> dict[str, frozenset[str] | None]:
    """resource -> the containers the HPA owns it in (None: all containers)."""
    owned: dict[str, frozenset[str] | None] = {}
    for m in hpa.metrics:
        if m.name not in RESOURCES:
            continue
        if m.type == "Resource":
            owned[m.name] = None
        elif m.type == "ContainerResource" and m.container:
            current = owned.get(m.name, frozenset())
            if current is not None:
                owned[m.name] = current | {m.container}
    return owned


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a VPA may control next to the HPAs on its workload."""

    controlled: Mapping[str, tuple[str, ...]]  # container -> the resources the VPA controls
    taken: Mapping[str, tuple[str, ...]]  # container -> the resources it leaves to an HPA
    warnings: tuple[str, ...]
    condition: dict[str, str] | None  # the VPA status condition, when something was taken
    by_hpa: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # HPA name -> the warnings naming it


def resolve(vpa: VPASpec, vpa_name: str, hpas: Sequence[tuple[str, HPASpec]], containers: Sequence[str]) -> Resolution:
    """The effective controlled resources of `vpa` for the containers of its pods."""
    owners: dict[tuple[str, str], str] = {}
    for hpa_name, hpa in hpas:
        if not same_target(hpa, vpa):
            continue
        for resource, in_containers in owned_by_hpa(hpa).items():
            for c in containers:
                if in_containers is None or c in in_containers:
                    owners.setdefault((c, resource), hpa_name)
    controlled: dict[str, tuple[str, ...]] = {}
    taken: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []
    by_hpa: dict[str, list[str]] = {}
    for c in containers:
        declared = vpa.controlled_resources(c) if not vpa.scaling_off(c) else ()
        keep = tuple(r for r in declared if (c, r) not in owners)
        lost = tuple(r for r in declared if (c, r) in owners)
        controlled[c] = keep
        if lost:
            taken[c] = lost
            for r in lost:
                warning = (
                    f"VerticalPodAutoscaler {vpa_name} and HorizontalPodAutoscaler {owners[(c, r)]} both "
                    f"scale {r} of container {c}: the HPA owns it, the VPA leaves it alone"
                )
                warnings.append(warning)
                by_hpa.setdefault(owners[(c, r)], []).append(warning)
    condition = None
    if taken:
        parts = "; ".join(f"{c}: {', '.join(rs)}" for c, rs in sorted(taken.items()))
        condition = {
            "type": CONDITION,
            "status": "True",
            "reason": "HorizontalPodAutoscalerOwnsResource",
            "message": f"resources scaled by a HorizontalPodAutoscaler are not controlled ({parts})",
        }
    return Resolution(controlled, taken, tuple(warnings), condition, {h: tuple(w) for h, w in by_hpa.items()})


def effective_spec(vpa: VPASpec, resolution: Resolution) -> VPASpec:
    """The VPA spec with per-container policies narrowed to the effective controlled resources."""
    policies = [p for p in vpa.container_policies if p.container_name not in resolution.taken]
    for container, keep in resolution.controlled.items():
        if container not in resolution.taken:
            continue
        base = vpa.policy_for(container) or ContainerPolicy(container)
        policies.append(replace(base, container_name=container, controlled_resources=keep))
    # keep the default policy last so named ones win, as GetContainerResourcePolicy looks them up
    policies.sort(key=lambda p: p.container_name == DEFAULT_CONTAINER)
    return replace(vpa, container_policies=tuple(policies))


def without_taken(recommendation: Any, resolution: Resolution) -> Any:
    """A status.recommendation without the resources an HPA owns (one made before the HPA came must
    not be applied to them): what the updater and the admission act on."""
    if not resolution.taken or not isinstance(recommendation, Mapping):
        return recommendation
    items = recommendation.get("containerRecommendations")
    if not isinstance(items, list):
        return recommendation
    out = []
    for item in items:
        taken = resolution.taken.get(item.get("containerName", "")) if isinstance(item, Mapping) else None
        if not taken:
            out.append(item)
            continue
        out.append({k: ({r: q for r, q in v.items() if r not in taken} if isinstance(v, Mapping) else v)
                    for k, v in item.items()})
    return {**recommendation, "containerRecommendations": out}
