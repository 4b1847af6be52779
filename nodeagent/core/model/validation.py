"""parse_pod: structural parsing (pydantic), then the checks that span fields, then defaulting.

Messages follow Kubernetes' field errors (`Invalid value: "x": ...`, `Required value`,
`Duplicate value: "a"`, `Unsupported value: ...`), each under the full camelCase field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from nodeagent.core.errors import FieldError, ValidationErrors, format_loc
from nodeagent.core.model.env import env_from_errors, env_var_errors
from nodeagent.core.model.lifecycle import lifecycle_errors
from nodeagent.core.model.pod import BUILTIN_PRIORITY_CLASSES, Container, Pod, PodSpec, ResourceRequirements
from nodeagent.core.model.probe import probe_errors
from nodeagent.core.model.volume import mount_errors, volume_errors
from nodeagent.core.names import (
    container_resource_name_errors,
    invalid,
    is_extended_resource_name,
    is_hugepage_resource_name,
    is_overcommit_allowed,
    label_value_errors,
    qualified_name_errors,
    quote,
)
from nodeagent.core.quantity import Quantity, parse_quantity

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_CUSTOM_ERRORS = frozenset({"required", "not_supported", "invalid"})
_ZERO = parse_quantity("0")
_LIMIT_REQUIRED = "Required value: Limit must be set for non overcommitable resources"
_EMPTY_KEY = 'operator must be Exists when `key` is empty, which means "match all values and all keys"'
_SECONDS_NEED_NO_EXECUTE = "effect must be 'NoExecute' when `tolerationSeconds` is set"
_EXISTS_NO_VALUE = "value must be empty when `operator` is 'Exists'"


def parse_pod(manifest: Mapping[str, Any]) -> Pod:
    """Parse, validate and default a Pod manifest; raise ValidationErrors naming every bad field."""
    try:
        # Manifests use the camelCase names only; snake_case stays for Python callers.
        pod = Pod.model_validate(manifest, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise ValidationErrors(_from_pydantic(exc)) from None
    return checked_pod(pod)


def checked_pod(pod: Pod) -> Pod:
    """The checks and defaults of parse_pod for a model already built (the API server validates
    the manifest once, and must not pay for a second model_validate)."""
    errors = pod_errors(pod)
    if errors:
        raise ValidationErrors(errors)
    return default_requests(pod)


def default_requests(pod: Pod) -> Pod:
    """A limit without a request sets the request, per resource (Kubernetes defaulting), in
    app and init containers alike."""
    return pod.model_copy(update={"spec": defaulted_spec(pod.spec)})


def defaulted_spec(spec: PodSpec) -> PodSpec:
    """default_requests for a spec alone (a spec shared by many pods is defaulted once)."""

    def defaulted(containers: list[Container]) -> list[Container]:
        out = []
        for c in containers:
            missing = {k: v for k, v in c.resources.limits.items() if k not in c.resources.requests}
            if missing:
                resources = c.resources.model_copy(update={"requests": {**c.resources.requests, **missing}})
                c = c.model_copy(update={"resources": resources})
            out.append(c)
        return out

    update: dict[str, Any] = {"containers": defaulted(spec.containers)}
    if spec.init_containers:
        update["init_containers"] = defaulted(spec.init_containers)
    return spec.model_copy(update=update)


def pod_errors(pod: Pod) -> list[FieldError]:
    """Checks pydantic cannot express per field: uniqueness, map keys, requests vs limits."""
    return metadata_errors(pod) + spec_errors(pod.spec)


def metadata_errors(pod: Pod) -> list[FieldError]:
    """pod_errors of the metadata: label and annotation keys and values."""
    return _map_errors("metadata.labels", pod.metadata.labels) + _annotation_errors(pod.metadata.annotations)


def spec_errors(spec: PodSpec) -> list[FieldError]:
    """pod_errors of the spec, which depend on nothing else (a spec shared by many pods is checked once)."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    grace = spec.termination_grace_period_seconds
    volumes, volume_errs = volume_errors(spec.volumes)
    errs += volume_errs
    for i, c in enumerate(spec.containers):
        if c.name in seen:
            errs.append(FieldError(f"spec.containers[{i}].name", f"Duplicate value: {quote(c.name)}"))
        seen.add(c.name)
        errs += _resource_errors(f"spec.containers[{i}].resources", c.resources)
        errs += _container_errors(f"spec.containers[{i}]", c, grace, init=False)
        errs += _resize_policy_never(f"spec.containers[{i}]", c, spec.restart_policy)
        errs += mount_errors(f"spec.containers[{i}]", c.volume_mounts, volumes)
    for i, c in enumerate(spec.init_containers):
        # validateInitContainers: names are unique across init and app containers
        if c.name in seen:
            errs.append(FieldError(f"spec.initContainers[{i}].name", f"Duplicate value: {quote(c.name)}"))
        seen.add(c.name)
        errs += _resource_errors(f"spec.initContainers[{i}].resources", c.resources)
        errs += _container_errors(f"spec.initContainers[{i}]", c, grace, init=True)
        if c.is_sidecar:
            errs += _resize_policy_never(f"spec.initContainers[{i}]", c, spec.restart_policy)
        errs += mount_errors(f"spec.initContainers[{i}]", c.volume_mounts, volumes)
    errs += _map_errors("spec.nodeSelector", spec.node_selector)
    errs += _toleration_errors(spec)
    builtin = BUILTIN_PRIORITY_CLASSES.get(spec.priority_class_name or "")
    if builtin is not None and spec.priority != builtin:
        errs.append(
            FieldError(
                "spec.priority",
                invalid(
                    spec.priority,
                    f"must be {builtin} (or omitted) for priorityClassName "
                    f"{quote(spec.priority_class_name)}",
                ),
            )
        )
    return errs


_INIT_ONLY_WITH_ALWAYS = "Forbidden: may not be set for init containers without restartPolicy=Always"


def _resize_policy_never(path: str, c: Container, restart_policy: str) -> list[FieldError]:
    """validateResizePolicy: a pod that never restarts containers may not resize by restarting one."""
    if restart_policy != "Never":
        return []
    return [FieldError(f"{path}.resizePolicy", f"Invalid value: {quote(p.restart_policy)}: must be 'NotRequired' "
                                               "when `restartPolicy` is 'Never'")
            for p in c.resize_policy if p.restart_policy != "NotRequired"]


def _container_errors(path: str, c: Container, grace: int, *, init: bool) -> list[FieldError]:
    """Probes, lifecycle, env sources and the container restartPolicy (validateContainers /
    validateInitContainers): a regular init container may have no probe and no lifecycle."""
    errs: list[FieldError] = []
    if not c.command and not c.image:
        errs.append(FieldError(f"{path}.command", "Required value: command is required when the container names "
                                                  "no image (a host process has no image entrypoint to fall back on)"))
    for i, var in enumerate(c.env):
        errs += env_var_errors(f"{path}.env[{i}]", var)
    errs += env_from_errors(f"{path}.envFrom", c.env_from)
    if c.restart_policy is not None and not init:
        errs.append(FieldError(f"{path}.restartPolicy", "Forbidden: may not be set for non-init containers"))
    seen: set[str] = set()
    for i, policy in enumerate(c.resize_policy):  # validateResizePolicy
        if policy.resource_name in seen:
            errs.append(FieldError(f"{path}.resizePolicy[{i}].resourceName",
                                   f"Duplicate value: {quote(policy.resource_name)}"))
        seen.add(policy.resource_name)
    if init and not c.is_sidecar and c.resize_policy:
        errs.append(FieldError(f"{path}.resizePolicy", _INIT_ONLY_WITH_ALWAYS))
    probes = (("livenessProbe", c.liveness_probe, "liveness"), ("readinessProbe", c.readiness_probe, "readiness"),
              ("startupProbe", c.startup_probe, "startup"))
    if init and not c.is_sidecar:
        if c.lifecycle is not None:
            errs.append(FieldError(f"{path}.lifecycle", _INIT_ONLY_WITH_ALWAYS))
        errs += [FieldError(f"{path}.{alias}", _INIT_ONLY_WITH_ALWAYS) for alias, p, _ in probes if p is not None]
        return errs
    if c.lifecycle is not None:
        errs += lifecycle_errors(f"{path}.lifecycle", c.lifecycle, grace)
    for alias, p, kind in probes:
        if p is not None:
            errs += probe_errors(f"{path}.{alias}", p, kind)  # type: ignore[arg-type]
    return errs


def _map_errors(path: str, items: Mapping[str, str]) -> list[FieldError]:
    """Label-style maps: qualified-name keys, label values."""
    errs = []
    for key, value in items.items():
        if key_errs := qualified_name_errors(key):
            errs.append(FieldError(path, invalid(key, "; ".join(key_errs))))
        if value_errs := label_value_errors(value):
            errs.append(FieldError(f"{path}.{key}", invalid(value, "; ".join(value_errs))))
    return errs


def _annotation_errors(annotations: Mapping[str, str]) -> list[FieldError]:
    errs = []
    total = 0
    for key, value in annotations.items():
        if key_errs := qualified_name_errors(key.lower()):
            errs.append(FieldError("metadata.annotations", invalid(key, "; ".join(key_errs))))
        total += len(key) + len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(
            FieldError(
                "metadata.annotations",
                f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
            )
        )
    return errs


def _resource_errors(path: str, res: ResourceRequirements) -> list[FieldError]:
    """Kubernetes' ValidateResourceRequirements, on the values as written (before defaulting)."""
    errs: list[FieldError] = []
    valid_names: set[str] = set()
    for kind, items in (("limits", res.limits), ("requests", res.requests)):
        for name, q in items.items():
            where = f"{path}.{kind}.{name}"
            if name_errs := container_resource_name_errors(name) or _hugepage_size_errors(name):
                errs.append(FieldError(where, invalid(name, "; ".join(name_errs))))
                continue
            valid_names.add(name)
            if q < _ZERO:
                errs.append(FieldError(where, invalid(str(q), "must be greater than or equal to 0")))
            elif is_extended_resource_name(name) and q.milli_value() % 1000 != 0:
                errs.append(FieldError(where, invalid(str(q), "must be an integer")))
    for name, request in res.requests.items():
        if name not in valid_names:
            continue
        limit = res.limits.get(name)
        if limit is None:
            if not is_overcommit_allowed(name):
                errs.append(FieldError(f"{path}.limits", _LIMIT_REQUIRED))
        elif not is_overcommit_allowed(name) and request != limit:
            detail = f"must be equal to {name} limit of {limit}"
            errs.append(FieldError(f"{path}.requests.{name}", invalid(str(request), detail)))
        elif request > limit:
            errs.append(
                FieldError(
                    f"{path}.limits.{name}",
                    f"must be greater than or equal to {name} request (limit {limit} < request {request})",
                )
            )
    names = set(res.requests) | set(res.limits)
    if any(is_hugepage_resource_name(n) for n in names) and not names & {"cpu", "memory"}:
        errs.append(FieldError(path, "Forbidden: HugePages require cpu or memory"))
    return errs


def _hugepage_size_errors(name: str) -> list[str]:
    if not is_hugepage_resource_name(name):
        return []
    try:
        size: Quantity = parse_quantity(name.removeprefix("hugepages-"))
    except ValueError:
        return ["hugepages size is not a valid quantity"]
    return [] if size > _ZERO else ["hugepages size must be positive"]


def _toleration_errors(spec: PodSpec) -> list[FieldError]:
    """Kubernetes' validateTolerations."""
    errs = []
    for i, t in enumerate(spec.tolerations):
        path = f"spec.tolerations[{i}]"
        if t.key:
            if key_errs := qualified_name_errors(t.key):
                errs.append(FieldError(f"{path}.key", invalid(t.key, "; ".join(key_errs))))
        elif t.operator != "Exists":
            errs.append(FieldError(f"{path}.operator", invalid(t.operator, _EMPTY_KEY)))
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            errs.append(FieldError(f"{path}.effect", invalid(t.effect or "", _SECONDS_NEED_NO_EXECUTE)))
        if t.operator == "Equal" and t.value and (value_errs := label_value_errors(t.value)):
            errs.append(FieldError(f"{path}.value", invalid(t.value, "; ".join(value_errs))))
        if t.operator == "Exists" and t.value:
            errs.append(FieldError(f"{path}.operator", invalid(t.value, _EXISTS_NO_VALUE)))
    return errs


def _short(value: object, limit: int = 80) -> object:
    text = repr(value)
    return value if len(text) <= limit else text[: limit - 3] + "..."


def _from_pydantic(exc: ValidationError) -> list[FieldError]:
    out: list[FieldError] = []
    for err in exc.errors(include_url=False):
        loc, kind = err["loc"], err["type"]
        if kind == "missing":
            message = "Required value"
        elif kind == "extra_forbidden":
            message = f"unknown field {quote(str(loc[-1]))}"
        elif kind == "value_error":
            message = str(err["ctx"]["error"])
        elif kind in _CUSTOM_ERRORS:
            message = err["msg"]
        else:
            detail = err["msg"].replace("Input should be", "must be", 1)
            message = invalid(_short(err.get("input")), detail)
        out.append(FieldError(format_loc(loc), message))
    return out
