"""The VPA admission step: a pod being created gets the recommended requests (and limits).

This is what makes updateMode Initial work (requests set at creation, never changed after), and it
is how Recreate and InPlaceOrRecreate replacements come up with the new size. As upstream's
admission controller (resource/pod/patch): for every container with a recommendation, the requests
become the capped target and, with controlledValues RequestsAndLimits, the limits keep their ratio
(vpa.policy); a JSON patch adds them (creating empty `resources`, `requests`, `limits` first where
missing) plus the annotations vpaUpdates ("Pod resources updated by <vpa>: container 0: cpu
request, memory request; ...") and vpaObservedContainers (the container names). With updateMode
Off nothing is changed but the observed containers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.autoscaling.vpa.policy import NewResources, pod_resources
from nodeagent.cluster.autoscaling.vpa.spec import VPASpec

UPDATES_ANNOTATION = "vpaUpdates"
OBSERVED_CONTAINERS_ANNOTATION = "vpaObservedContainers"


@dataclass(frozen=True, slots=True)
class Admission:
    patch: tuple[dict[str, Any], ...]  # RFC 6902 operations, in order
    pod: dict[str, Any]  # the pod with the patch applied
    updates: str  # the vpaUpdates annotation ("" when nothing changed)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def admit(pod: Mapping[str, Any], vpa_name: str, spec: VPASpec, recommendation: object) -> Admission:
    """The patch for a pod matched by the VPA `vpa_name` (the caller matched it)."""
    out = copy.deepcopy(dict(pod))
    ops: list[dict[str, Any]] = []
    containers = [c for c in (out.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    meta = out.setdefault("metadata", {})
    if not isinstance(meta.get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        meta["annotations"] = {}
    observed = ", ".join(str(c.get("name", "")) for c in containers)
    ops.append({"op": "add", "path": f"/metadata/annotations/{OBSERVED_CONTAINERS_ANNOTATION}", "value": observed})
    meta["annotations"][OBSERVED_CONTAINERS_ANNOTATION] = observed
    updates: list[str] = []
    if spec.update_mode != "Off":
        for i, (container, new) in enumerate(zip(containers, pod_resources(out, spec, recommendation), strict=True)):
            note = _container_patch(ops, container, i, new)
            if note is not None:
                updates.append(note)
    text = ""
    if updates:
        text = f"Pod resources updated by {vpa_name}: " + "; ".join(updates)
        ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(UPDATES_ANNOTATION)}", "value": text})
        meta["annotations"][UPDATES_ANNOTATION] = text
    return Admission(tuple(ops), out, text)


def _container_patch(
    ops: list[dict[str, Any]], container: dict[str, Any], i: int, new: NewResources | None
) -> str | None:
    if new is None or (not new.requests and not new.limits):
        return None
    base = f"/spec/containers/{i}/resources"
    resources = container.get("resources")
    if not isinstance(resources, dict):
        ops.append({"op": "add", "path": base, "value": {}})
        resources = container["resources"] = {}
    notes = list(new.annotations)
    for field, word, values in (("requests", "request", new.requests), ("limits", "limit", new.limits)):
        if not values:
            continue
        if not isinstance(resources.get(field), dict):
            ops.append({"op": "add", "path": f"{base}/{field}", "value": {}})
            resources[field] = {}
        for resource in sorted(values):
            text = str(values[resource])
            ops.append({"op": "add", "path": f"{base}/{field}/{_escape(resource)}", "value": text})
            resources[field][resource] = text
            notes.append(f"{resource} {word}")
    return f"container {i}: " + ", ".join(notes)
