"""PriorityClass objects (scheduling.k8s.io/v1) and resolving a pod's priority from them.

Validation follows the API server (pkg/apis/scheduling/validation) and the Priority admission
plugin: user classes may not exceed 1000000000; names starting with "system-" are reserved for the
two built-in classes; at most one class is the global default. A pod names its class in
priorityClassName; without one it gets the global default class (its name is filled in), or 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import SYSTEM_CLUSTER_CRITICAL, SYSTEM_CRITICAL_PRIORITY, SYSTEM_NODE_CRITICAL
from nodeagent.core.names import dns1123_subdomain_errors, invalid

API_VERSION = "scheduling.k8s.io/v1"
KIND = "PriorityClass"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER = "PreemptLowerPriority", "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_FIELDS = {"apiVersion", "kind", "metadata", "value", "globalDefault", "preemptionPolicy",
           "description"}
_METADATA_FIELDS = {"name", "labels", "annotations", "uid", "resourceVersion", "creationTimestamp",
                    "generation", "managedFields"}


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND,
                               "metadata": {"name": self.name}, "value": self.value,
                               "globalDefault": self.global_default,
                               "preemptionPolicy": self.preemption_policy}
        if self.description:
            out["description"] = self.description
        return out


SYSTEM_PRIORITY_CLASSES: dict[str, PriorityClass] = {
    SYSTEM_CLUSTER_CRITICAL: PriorityClass(
        SYSTEM_CLUSTER_CRITICAL, SYSTEM_CRITICAL_PRIORITY,
        description="Used for system critical pods that must run in the cluster, but can be "
                    "moved to another node if necessary."),
    SYSTEM_NODE_CRITICAL: PriorityClass(
        SYSTEM_NODE_CRITICAL, SYSTEM_CRITICAL_PRIORITY + 1000,
        description="Used for system critical pods that must not be moved from their current "
                    "node."),
}


def parse_priority_class(manifest: Mapping[str, Any]) -> PriorityClass:
    """A validated PriorityClass from its manifest; ValidationErrors names every bad field."""
    errs: list[FieldError] = []
    if not isinstance(manifest, Mapping):
        raise ValidationErrors([FieldError("", "a PriorityClass must be a mapping")])
    for key in sorted(set(manifest) - _FIELDS):
        errs.append(FieldError(key, "unknown field"))
    if manifest.get("apiVersion") != API_VERSION:
        errs.append(FieldError("apiVersion", f"Unsupported value: {manifest.get('apiVersion')!r}: "
                                             f"supported values: {API_VERSION!r}"))
    if manifest.get("kind") != KIND:
        errs.append(FieldError("kind", f"Unsupported value: {manifest.get('kind')!r}: "
                                       f"supported values: {KIND!r}"))
    meta = manifest.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(meta, Mapping):
        errs += [FieldError(f"metadata.{k}", "unknown field") for k in sorted(set(meta) - _METADATA_FIELDS)]
    if not isinstance(name, str) or not name:
        errs.append(FieldError("metadata.name", "Required value: name or generateName is required"))
        name = ""
    value = manifest.get("value")
    if value is None:
        errs.append(FieldError("value", "Required value"))
    elif isinstance(value, bool) or not isinstance(value, int) or not INT32_MIN <= value <= INT32_MAX:
        errs.append(FieldError("value", invalid(value, "must be a 32-bit integer")))
    global_default = manifest.get("globalDefault", False)
    if not isinstance(global_default, bool):
        errs.append(FieldError("globalDefault", invalid(global_default, "must be a boolean")))
    policy = manifest.get("preemptionPolicy", PREEMPT_LOWER_PRIORITY)
    description = manifest.get("description", "")
    if not isinstance(description, str):
        errs.append(FieldError("description", invalid(description, "must be a string")))
    if errs:
        raise ValidationErrors(errs)
    assert isinstance(value, int)
    pc = PriorityClass(name, value, global_default, policy, description)
    if errs := validate_priority_class(pc):
        raise ValidationErrors(errs)
    return pc


def validate_priority_class(pc: PriorityClass) -> list[FieldError]:
    """ValidatePriorityClass: name, reserved system- prefix, user value ceiling, policy."""
    errs = [FieldError("metadata.name", invalid(pc.name, e)) for e in dns1123_subdomain_errors(pc.name)]
    if pc.name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        if problem := _system_class_problem(pc):
            errs.append(FieldError("metadata.name", "Forbidden: priority class names with "
                                   f"'{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved for "
                                   f"system use only. error: {problem}"))
    elif pc.value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(FieldError("value", "Forbidden: maximum allowed value of a user defined "
                               f"priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"))
    if pc.preemption_policy not in PREEMPTION_POLICIES:
        errs.append(FieldError("preemptionPolicy", f"Unsupported value: {pc.preemption_policy!r}: "
                               "supported values: 'Never', 'PreemptLowerPriority'"))
    return errs


def _system_class_problem(pc: PriorityClass) -> str | None:
    """IsKnownSystemPriorityClass: the wording of its errors."""
    known = SYSTEM_PRIORITY_CLASSES.get(pc.name)
    if known is None:
        return f"{pc.name} is not a known system priority class"
    if known.value != pc.value:
        return f"value of {pc.name} PriorityClass must be {known.value}"
    if known.global_default != pc.global_default:
        return f"globalDefault of {pc.name} PriorityClass must be {known.global_default}"
    return None


@dataclass(frozen=True)
class ResolvedPriority:
    value: int
    class_name: str | None
    preemption_policy: str


class PriorityClassRegistry:
    """The cluster's classes, built-ins included; `resolve` is what the admission plugin does."""

    def __init__(self, classes: Iterable[PriorityClass] = ()) -> None:
        self._classes: dict[str, PriorityClass] = dict(SYSTEM_PRIORITY_CLASSES)
        for pc in classes:
            self.add(pc)

    def add(self, pc: PriorityClass) -> None:
        """Create or update a class. Value and preemptionPolicy are immutable; a second global
        default is refused as the Priority admission plugin refuses it."""
        if errs := validate_priority_class(pc):
            raise ValidationErrors(errs)
        old = self._classes.get(pc.name)
        if old is not None:
            if pc.name in SYSTEM_PRIORITY_CLASSES:
                raise FieldError("metadata.name", f"Forbidden: {pc.name} is a system priority class"
                                 " and may not be changed")
            if old.value != pc.value:
                raise FieldError("value", "Forbidden: may not be changed in an update.")
            if old.preemption_policy != pc.preemption_policy:
                raise FieldError("preemptionPolicy", "Invalid value: field is immutable")
        if pc.global_default:
            current = self.default()
            if current is not None and current.name != pc.name:
                raise FieldError("globalDefault", f"Forbidden: PriorityClass {current.name} is "
                                 "already marked as default. Only one default can exist")
        self._classes[pc.name] = pc

    def remove(self, name: str) -> PriorityClass:
        if name in SYSTEM_PRIORITY_CLASSES:
            raise FieldError("metadata.name", f"Forbidden: {name} is a system priority class "
                             "and may not be deleted")
        return self._classes.pop(name)

    def get(self, name: str) -> PriorityClass | None:
        return self._classes.get(name)

    def __iter__(self) -> Iterator[PriorityClass]:
        return iter(sorted(self._classes.values(), key=lambda pc: pc.name))

    def default(self) -> PriorityClass | None:
        """The global default class (the lowest-valued one, should a race have made two)."""
        defaults = [pc for pc in self._classes.values() if pc.global_default]
        return min(defaults, key=lambda pc: pc.value) if defaults else None

    def resolve(self, class_name: str | None) -> ResolvedPriority:
        """A pod's priority from its priorityClassName (None or "" for none)."""
        if not class_name:
            pc = self.default()
            if pc is None:
                return ResolvedPriority(0, None, PREEMPT_LOWER_PRIORITY)
        else:
            pc = self._classes.get(class_name)
            if pc is None:
                raise FieldError("spec.priorityClassName",
                                 f"Forbidden: no PriorityClass with name {class_name} was found")
        return ResolvedPriority(pc.value, pc.name, pc.preemption_policy)
