"""The VPA admission plugin over the registry (upstream's vpa-admission-controller webhook, built in).

A pod being created gets the recommended requests (and limits) of the VPA that controls it
(autoscaling/vpa/admission.py): that is what updateMode Initial does, and how Recreate and
InPlaceOrRecreate replacements come up with the new size. The controlling VPA is one of the
namespace's VPAs whose target's selector (spec.selector of the targetRef object) selects the pod;
with several, the oldest, as upstream's GetControllingVPAForPod breaks ties. Deviation: upstream
also requires the target to be the pod's top-most controller (the owner chain); here a selector
match is enough. A VPA with updateMode Off only records vpaObservedContainers. What an HPA on the
same target scales (autoscaling/coexist) is left as the pod asks, whatever the recommendation says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from nodeagent.cluster.autoscaling.coexist import effective_spec, resolve, without_taken
from nodeagent.cluster.autoscaling.hpa.spec import parse_hpa_spec
from nodeagent.cluster.autoscaling.vpa.admission import admit
from nodeagent.cluster.autoscaling.vpa.spec import VPASpec, parse_vpa_spec
from nodeagent.cluster.controllers.common.selectors import matches
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.errors import ValidationErrors

log = structlog.get_logger(__name__)


class VPAAdmission:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.vpas = registry.resource("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
        self.hpas = registry.resource("autoscaling", "v2", "horizontalpodautoscalers")

    def _info(self, api_version: str, kind: str) -> ResourceInfo | None:
        for info in self.registry.catalog:
            if info.kind == kind and (not api_version or info.api_version == api_version):
                return info
        return None

    async def _selects(self, ns: str, spec: VPASpec, pod_labels: Mapping[str, str]) -> bool:
        info = self._info(spec.target_ref.get("apiVersion", ""), spec.target_ref.get("kind", ""))
        if info is None:
            return False
        try:
            target = await self.registry.resource(info.group, info.version, info.plural).get(
                ns if info.namespaced else None, spec.target_ref.get("name", ""))
        except StatusError:
            return False
        selector = (target.get("spec") or {}).get("selector")
        return matches(selector, pod_labels)

    async def admit_pod(self, pod: dict[str, Any]) -> bool:
        """Patch the pod in place with its VPA's recommendation; whether its resources changed."""
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        pod_labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        assert isinstance(pod_labels, Mapping)
        listed = await self.vpas.list(ns, ListOptions())
        chosen: tuple[str, str, VPASpec, Any] | None = None
        for vpa in listed.items:
            try:
                spec = parse_vpa_spec(vpa.get("spec"))
            except ValidationErrors:
                continue
            if not await self._selects(ns, spec, pod_labels):
                continue
            created = str(vpa["metadata"].get("creationTimestamp") or "")
            if chosen is None or created < chosen[0]:
                chosen = (created, str(vpa["metadata"]["name"]), spec, (vpa.get("status") or {}).get("recommendation"))
        if chosen is None:
            return False
        _, name, spec, recommendation = chosen
        hpas = []
        for hpa in (await self.hpas.list(ns, ListOptions())).items:
            try:
                hpas.append((str(hpa["metadata"]["name"]), parse_hpa_spec(hpa.get("spec"))))
            except ValidationErrors:
                continue
        containers = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or ()
                      if isinstance(c, Mapping)]
        resolution = resolve(spec, name, hpas, containers)
        if resolution.taken:
            spec, recommendation = effective_spec(spec, resolution), without_taken(recommendation, resolution)
        result = admit(pod, name, spec, recommendation)
        pod.clear()
        pod.update(result.pod)
        if result.updates:
            log.info("vpa_pod_admitted", pod=f"{ns}/{meta.get('name') or meta.get('generateName') or ''}", vpa=name,
                     updates=result.updates)
        return bool(result.updates)
