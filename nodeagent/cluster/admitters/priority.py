"""The Priority admission plugin over the registry (plugin/pkg/admission/priority): a pod's
spec.priority and spec.preemptionPolicy come from its PriorityClass (the global default class, or
0, without one); a pod naming a class that does not exist, or stating a priority or policy other
than its class's, is 403 Forbidden. A second globalDefault class is refused the same way."""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.admission.priority import PriorityClassRegistry, parse_priority_class
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.errors import FieldError, ValidationErrors

_PC_FIELDS = ("value", "globalDefault", "preemptionPolicy", "description")


class PriorityAdmission:
    def __init__(self, registry: Registry) -> None:
        self.classes = registry.resource("scheduling.k8s.io", "v1", "priorityclasses")
        self._built: tuple[tuple[tuple[str, int], ...], PriorityClassRegistry] | None = None

    async def _registry(self) -> PriorityClassRegistry:
        """The classes as stored now; listed and built again only when one of them changed (a key
        and its mod revision pin its content), not on every pod create: the stamp is read from
        the store without decoding the classes."""
        stamp = await self.classes.versions(None)
        if self._built is not None and self._built[0] == stamp:
            return self._built[1]
        items = (await self.classes.list(None, ListOptions())).items  # newer than the stamp at worst: rebuilt next time
        reg = self._build(items)
        self._built = (stamp, reg)
        return reg

    @staticmethod
    def _build(items: list[dict[str, Any]]) -> PriorityClassRegistry:
        reg = PriorityClassRegistry()
        for obj in items:
            bare = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": obj["metadata"]["name"]}, **{k: obj[k] for k in _PC_FIELDS if k in obj}}
            try:
                pc = parse_priority_class(bare)
                if reg.get(pc.name) is None or not pc.name.startswith("system-"):
                    reg.add(pc)
            except (ValidationErrors, FieldError):
                continue  # a second default (a race upstream allows too): the lowest one wins in resolve
        return reg

    async def admit_pod(self, pod: dict[str, Any]) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        name = str(pod["metadata"].get("name") or "")
        reg = await self._registry()
        try:
            resolved = reg.resolve(spec.get("priorityClassName") or None)
        except FieldError:
            raise errors.forbidden("pods", "", name, f"no PriorityClass with name {spec.get('priorityClassName')} "
                                                     "was found") from None
        given = spec.get("priority")
        if given is not None and given != resolved.value:
            raise errors.forbidden("pods", "", name, f"the integer value of priority ({given}) must not be provided "
                                                     "in pod spec; priority admission controller computed "
                                                     f"{resolved.value} from the given PriorityClass name")
        policy = spec.get("preemptionPolicy")
        if policy is not None and policy != resolved.preemption_policy:
            raise errors.forbidden("pods", "", name, f"the string value of PreemptionPolicy ({policy}) must not be "
                                                     "provided in pod spec; priority admission controller computed "
                                                     f"{resolved.preemption_policy} from the given PriorityClass name")
        spec["priority"] = resolved.value
        spec["preemptionPolicy"] = resolved.preemption_policy
        if resolved.class_name:
            spec["priorityClassName"] = resolved.class_name

    async def admit_class(self, operation: str, obj: dict[str, Any]) -> None:
        if operation not in ("CREATE", "UPDATE") or not obj.get("globalDefault"):
            return
        name = str(obj["metadata"].get("name") or "")
        for other in (await self.classes.list(None, ListOptions())).items:
            if other.get("globalDefault") and other["metadata"]["name"] != name:
                raise errors.forbidden("priorityclasses", "scheduling.k8s.io", name,
                                       f"PriorityClass {other['metadata']['name']} is already marked as default. "
                                       "Only one default can exist")
