"""What the scheduler counts for a pod whose resources are being resized in place (KEP-1287).

A resize moves a container through three sets of resources: desired (the spec, changed through
pods/resize), allocated (what the kubelet admitted: containerStatuses[].allocatedResources) and
actual (what its cgroups run with: containerStatuses[].resources). Until they agree the node may
hold any of them, so upstream's resourcehelper.PodRequests with UseStatusResources (the
scheduler's calculateResource, with InPlacePodVerticalScaling GA) counts, per container, the
larger of the three per resource (determineContainerReqs); when the resize is Infeasible
(PodResizePending reason Infeasible) the desired resources will never be applied and only
max(actual, allocated) counts. Only containers with a status reporting resources are affected;
init containers only when they are sidecars (restartPolicy Always), as upstream. The containers
are then combined as always (sidecars with the app containers, the init containers' peak).

Pure: the pod model and its stored object in, quantities out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.core.model import Container, Pod
from nodeagent.core.quantity import Quantity, coerce_quantity
from nodeagent.core.resize import PENDING
from nodeagent.core.resources import combine_containers

INFEASIBLE = "Infeasible"


@dataclass(frozen=True, slots=True)
class StatusResources:
    """One container's requests as its status reports them."""

    allocated: Mapping[str, Quantity]
    actual: Mapping[str, Quantity]


def _quantities(raw: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    for name, value in raw.items() if isinstance(raw, Mapping) else ():
        try:
            out[str(name)] = coerce_quantity(value)
        except (TypeError, ValueError):
            continue  # a status the agent wrote badly does not make the pod unschedulable
    return out


def status_resources(obj: Mapping[str, Any] | None) -> tuple[dict[str, StatusResources], bool]:
    """The containers' reported resources by name (containers and init containers), and whether
    the pod's resize is Infeasible (IsPodResizeInfeasible)."""
    status = (obj or {}).get("status")
    if not isinstance(status, Mapping):
        return {}, False
    out: dict[str, StatusResources] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            if not isinstance(cs, Mapping) or not isinstance(cs.get("resources"), Mapping):
                continue  # upstream: cs.Resources == nil, the spec counts
            out[str(cs.get("name", ""))] = StatusResources(
                _quantities(cs.get("allocatedResources")), _quantities(cs["resources"].get("requests")))
    infeasible = any(isinstance(c, Mapping) and c.get("type") == PENDING and c.get("status") == "True"
                     and c.get("reason") == INFEASIBLE for c in status.get("conditions") or ())
    return out, infeasible


def container_requests(desired: Mapping[str, Quantity], reported: StatusResources | None,
                       infeasible: bool) -> dict[str, Quantity]:
    """determineContainerReqs: per resource the max of desired (unless Infeasible), allocated and
    actual; the desired requests alone when the status reports none."""
    if reported is None:
        return dict(desired)
    sources = [reported.actual, reported.allocated] if infeasible else [desired, reported.actual, reported.allocated]
    out: dict[str, Quantity] = {}
    for amounts in sources:
        for name, q in amounts.items():
            if name not in out or q > out[name]:
                out[name] = q
    return out


def requests_of(pod: Pod, obj: Mapping[str, Any] | None) -> Callable[[Container], Mapping[str, Quantity]]:
    """Each container's requests as the scheduler counts them (for the pod's totals and its
    non-zero requests, both of which upstream computes with UseStatusResources)."""
    reported, infeasible = status_resources(obj)
    if not reported:
        return lambda c: c.resources.requests
    plain_init = {id(c) for c in pod.spec.init_containers if not c.is_sidecar}

    def of(c: Container) -> Mapping[str, Quantity]:
        if id(c) in plain_init:
            return c.resources.requests
        return container_requests(c.resources.requests, reported.get(c.name), infeasible)

    return of


def pod_requests(pod: Pod, obj: Mapping[str, Any] | None) -> dict[str, Quantity]:
    """The pod's requests as the scheduler counts them (see the module docstring)."""
    return combine_containers(pod, requests_of(pod, obj))


def counted_status(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pod's status the count depends on (the cache parses the pod again when it changes):
    the containers' reported resources and the PodResizePending condition's reason."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return ()
    reported = tuple((cs.get("name"), cs.get("resources"), cs.get("allocatedResources"))
                     for key in ("containerStatuses", "initContainerStatuses") for cs in status.get(key) or ()
                     if isinstance(cs, Mapping) and cs.get("resources") is not None)
    pending = tuple((c.get("status"), c.get("reason")) for c in status.get("conditions") or ()
                    if isinstance(c, Mapping) and c.get("type") == PENDING)
    return reported, pending
