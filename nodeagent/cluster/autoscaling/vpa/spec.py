"""The autoscaling.k8s.io/v1 VerticalPodAutoscaler spec as typed values, validated as upstream's webhook.

Validation follows vertical-pod-autoscaler/pkg/admission-controller/resource/vpa/validation.go:
targetRef required; updatePolicy.updateMode one of Off, Initial, Recreate, Auto (deprecated, the
same as Recreate), InPlaceOrRecreate (InPlace is alpha behind a gate that is off here: Forbidden);
minReplicas positive; containerPolicies need a containerName ("*" is the default policy), a mode of
Auto or Off, maxAllowed not below minAllowed, no controlledValues with mode Off, controlledResources
of cpu and memory only. Errors name the field, in the API's `field: ...` wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import invalid, quote
from nodeagent.core.quantity import Quantity, coerce_quantity

UpdateMode = Literal["Off", "Initial", "Recreate", "Auto", "InPlaceOrRecreate", "InPlace"]
UPDATE_MODES = ("Off", "Initial", "Recreate", "InPlaceOrRecreate", "Auto", "InPlace")
SCALING_MODES = ("Auto", "Off")
CONTROLLED_VALUES = ("RequestsAndLimits", "RequestsOnly")
DEFAULT_CONTAINER = "*"


@dataclass(frozen=True, slots=True)
class ContainerPolicy:
    container_name: str
    mode: str = "Auto"
    min_allowed: Mapping[str, Quantity] = field(default_factory=dict)
    max_allowed: Mapping[str, Quantity] = field(default_factory=dict)
    controlled_resources: tuple[str, ...] = ("cpu", "memory")
    controlled_values: str = "RequestsAndLimits"


@dataclass(frozen=True, slots=True)
class VPASpec:
    target_ref: Mapping[str, str]
    update_mode: UpdateMode = "Recreate"  # GetUpdateMode: unset means Recreate
    min_replicas: int | None = None  # per-VPA override of the updater's --min-replicas
    container_policies: tuple[ContainerPolicy, ...] = ()

    def policy_for(self, container: str) -> ContainerPolicy | None:
        """GetContainerResourcePolicy: the container's own policy, else the "*" one, else None."""
        default = None
        for p in self.container_policies:
            if p.container_name == container:
                return p
            if p.container_name == DEFAULT_CONTAINER:
                default = p
        return default

    def controlled_values(self, container: str) -> str:
        p = self.policy_for(container)
        return "RequestsAndLimits" if p is None else p.controlled_values

    def controlled_resources(self, container: str) -> tuple[str, ...]:
        p = self.policy_for(container)
        return ("cpu", "memory") if p is None else p.controlled_resources

    def scaling_off(self, container: str) -> bool:
        p = self.policy_for(container)
        return p is not None and p.mode == "Off"


def _resource_list(raw: object, path: str, errors: list[FieldError]) -> dict[str, Quantity]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(FieldError(path, invalid(raw, "must be a resource list")))
        return {}
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = coerce_quantity(value)
        except (TypeError, ValueError) as e:
            errors.append(FieldError(f"{path}[{name}]", invalid(value, str(e))))
            continue
        if name == "cpu" and out[name].nanos % 1_000_000:
            errors.append(
                FieldError(f"{path}[{name}]", invalid(str(out[name]), "must be a whole number of milli CPUs"))
            )
        if name == "memory" and out[name].nanos % 1_000_000_000:
            errors.append(FieldError(f"{path}[{name}]", invalid(str(out[name]), "must be a whole number of bytes")))
    return out


def _policy(raw: object, path: str, errors: list[FieldError]) -> ContainerPolicy | None:
    if not isinstance(raw, Mapping):
        errors.append(FieldError(path, invalid(raw, "must be an object")))
        return None
    name = raw.get("containerName")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(f"{path}.containerName", "Required value"))
        return None
    mode = raw.get("mode") or "Auto"
    if mode not in SCALING_MODES:
        errors.append(
            FieldError(
                f"{path}.mode",
                f"Unsupported value: {quote(mode)}: supported values: " + ", ".join(quote(m) for m in SCALING_MODES),
            )
        )
        return None
    lo = _resource_list(raw.get("minAllowed"), f"{path}.minAllowed", errors)
    hi = _resource_list(raw.get("maxAllowed"), f"{path}.maxAllowed", errors)
    for resource, maximum in hi.items():
        minimum = lo.get(resource)
        if minimum is not None and maximum < minimum:
            errors.append(
                FieldError(
                    f"{path}.maxAllowed[{resource}]",
                    invalid(str(maximum), f'max resource for {resource} is lower than min of "{minimum}"'),
                )
            )
    values = raw.get("controlledValues")
    if values is not None and mode == "Off":
        errors.append(
            FieldError(
                f"{path}.controlledValues",
                "Forbidden: controlledValues shouldn't be specified if container scaling mode is off",
            )
        )
    values = values or "RequestsAndLimits"
    if values not in CONTROLLED_VALUES:
        errors.append(
            FieldError(
                f"{path}.controlledValues",
                f"Unsupported value: {quote(values)}: supported values: "
                + ", ".join(quote(v) for v in CONTROLLED_VALUES),
            )
        )
    resources = raw.get("controlledResources")
    if resources is None:
        controlled: tuple[str, ...] = ("cpu", "memory")
    elif not isinstance(resources, list):
        errors.append(FieldError(f"{path}.controlledResources", invalid(resources, "must be a list")))
        controlled = ()
    else:
        controlled = tuple(str(r) for r in resources)
        for i, r in enumerate(controlled):
            if r not in ("cpu", "memory"):
                errors.append(
                    FieldError(
                        f"{path}.controlledResources[{i}]",
                        f'Unsupported value: {quote(r)}: supported values: "cpu", "memory"',
                    )
                )
    return ContainerPolicy(name, mode, lo, hi, controlled, values)


def parse_vpa_spec(spec: object, path: str = "spec") -> VPASpec:
    """Validate and type a VPA spec; ValidationErrors names each field."""
    errors: list[FieldError] = []
    if not isinstance(spec, Mapping):
        raise ValidationErrors([FieldError(path, invalid(spec, "must be an object"))])
    ref = spec.get("targetRef")
    if not isinstance(ref, Mapping):
        errors.append(
            FieldError(
                f"{path}.targetRef", "Required value: If you're using v1beta1 version of the API, please migrate to v1"
            )
        )
        ref = {}
    else:
        for key in ("kind", "name"):
            if not ref.get(key):
                errors.append(FieldError(f"{path}.targetRef.{key}", "Required value"))
    mode: str = "Recreate"
    min_replicas = None
    update = spec.get("updatePolicy")
    if update is not None:
        if not isinstance(update, Mapping):
            errors.append(FieldError(f"{path}.updatePolicy", invalid(update, "must be an object")))
        else:
            raw_mode = update.get("updateMode")
            if raw_mode is None:
                errors.append(
                    FieldError(
                        f"{path}.updatePolicy.updateMode",
                        "Required value: updateMode is required if UpdatePolicy is used",
                    )
                )
            elif raw_mode not in UPDATE_MODES:
                errors.append(
                    FieldError(
                        f"{path}.updatePolicy.updateMode",
                        f"Unsupported value: {quote(raw_mode)}: "
                        "supported values: " + ", ".join(quote(m) for m in UPDATE_MODES),
                    )
                )
            elif raw_mode == "InPlace":
                errors.append(
                    FieldError(
                        f"{path}.updatePolicy.updateMode",
                        "Forbidden: in order to use UpdateMode InPlace, you must enable feature gate "
                        "InPlace in the admission-controller args",
                    )
                )
            else:
                mode = raw_mode
            raw_min = update.get("minReplicas")
            if raw_min is not None:
                if isinstance(raw_min, bool) or not isinstance(raw_min, int) or raw_min <= 0:
                    errors.append(
                        FieldError(
                            f"{path}.updatePolicy.minReplicas", invalid(raw_min, "minReplicas has to be positive")
                        )
                    )
                else:
                    min_replicas = raw_min
    policies: list[ContainerPolicy] = []
    resource_policy = spec.get("resourcePolicy")
    if resource_policy is not None:
        raw_policies = resource_policy.get("containerPolicies") if isinstance(resource_policy, Mapping) else None
        if raw_policies is not None and not isinstance(raw_policies, list):
            errors.append(
                FieldError(f"{path}.resourcePolicy.containerPolicies", invalid(raw_policies, "must be a list"))
            )
        for i, raw in enumerate(raw_policies or []):
            p = _policy(raw, f"{path}.resourcePolicy.containerPolicies[{i}]", errors)
            if p is not None:
                policies.append(p)
    if errors:
        raise ValidationErrors(errors)
    return VPASpec(
        {k: str(v) for k, v in ref.items() if k in ("apiVersion", "kind", "name")},
        mode,  # type: ignore[arg-type]
        min_replicas,
        tuple(policies),
    )
