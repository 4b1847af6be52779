"""A container's environment from its pod: env values, valueFrom (downward API, ConfigMap and
Secret keys) and envFrom, resolved as the kubelet's makeEnvironmentVariables does. Pure.

Order and precedence: envFrom sources first, in order (a later source overrides an earlier one;
keys in sorted order within a source, for a stable result), then `env` in order, overriding
envFrom. A literal `value` is $(VAR)-expanded against everything defined before it; values from
valueFrom and envFrom are taken as they are. Keys of an envFrom source that are not valid env var
names (after the prefix) are skipped and reported (the kubelet's InvalidEnvironmentVariableNames
event). A missing ConfigMap, Secret or key is an error (CreateContainerConfigError) unless the
reference is optional.

resourceFieldRef: a container without a cpu, memory or ephemeral-storage limit reads the node's
allocatable instead (defaultPodLimitsForDownwardAPI); the value is divided by the divisor and
rounded up (the kubelet's math.Ceil), cpu in millicores over the divisor's millicores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.core.expansion import expand
from nodeagent.core.model.env import EnvFromSource, EnvVar, ObjectFieldSelector, ResourceFieldSelector, split_subscript
from nodeagent.core.model.pod import Container, Pod
from nodeagent.core.names import env_var_name_errors
from nodeagent.core.quantity import Quantity

REASON_CONFIG_ERROR = "CreateContainerConfigError"
EVENT_INVALID_NAMES = "InvalidEnvironmentVariableNames"
_LIMIT_DEFAULTED = ("cpu", "memory", "ephemeral-storage")


class EnvResolutionError(ValueError):
    """The container cannot be configured (the kubelet's CreateContainerConfigError)."""


@dataclass(frozen=True)
class NodeFacts:
    """What the downward API reads from the node and the pod's status."""

    node_name: str = ""
    host_ips: tuple[str, ...] = ()
    pod_ips: tuple[str, ...] = ()
    allocatable: Mapping[str, Quantity] = field(default_factory=dict)  # cpu, memory, ephemeral-storage


@dataclass(frozen=True)
class EnvSources:
    """The ConfigMaps and Secrets of the pod's namespace, by name (absent: not found)."""

    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedKeys:
    """envFrom keys that are not valid env var names; `message` is the kubelet's event text."""

    kind: str  # "configMap" or "secret"
    name: str
    keys: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class ResolvedEnv:
    env: tuple[tuple[str, str], ...]
    skipped: tuple[SkippedKeys, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.env)


def resolve_env(pod: Pod, container: Container, facts: NodeFacts, sources: EnvSources | None = None) -> ResolvedEnv:
    """The container's environment, names in definition order; EnvResolutionError if it cannot be built."""
    sources = sources or EnvSources()
    env: dict[str, str] = {}
    skipped: list[SkippedKeys] = []
    for src in container.env_from:
        skipped += _apply_env_from(env, src, pod.metadata.namespace, sources)
    for var in container.env:
        value = _value_of(var, env, pod, container, facts, sources)
        if value is not None:
            env.pop(var.name, None)  # a redefinition moves to its new place, as a later assignment
            env[var.name] = value
    return ResolvedEnv(tuple(env.items()), tuple(skipped))


def _apply_env_from(env: dict[str, str], src: EnvFromSource, namespace: str, sources: EnvSources) -> list[SkippedKeys]:
    prefix = src.prefix or ""
    if src.config_map_ref is not None:
        kind, label, name, optional = "configMap", "configmap", src.config_map_ref.name, src.config_map_ref.optional
        data: Mapping[str, str] | None = sources.config_maps.get(name)
    elif src.secret_ref is not None:
        kind, label, name, optional = "secret", "secret", src.secret_ref.name, src.secret_ref.optional
        raw = sources.secrets.get(name)
        data = None if raw is None else {k: v.decode("utf-8", "replace") for k, v in raw.items()}
    else:
        return []
    if data is None:
        if optional:
            return []
        raise EnvResolutionError(f'{label} "{name}" not found')
    invalid: list[str] = []
    for key in sorted(data):
        full = prefix + key
        if env_var_name_errors(full):
            invalid.append(full)
            continue
        env.pop(full, None)
        env[full] = data[key]
    if not invalid:
        return []
    message = (f"Keys [{', '.join(invalid)}] from the EnvFrom {label} {namespace}/{name} were skipped since they "
               "are considered invalid environment variable names.")
    return [SkippedKeys(kind, name, tuple(invalid), message)]


def _value_of(var: EnvVar, env: Mapping[str, str], pod: Pod, container: Container, facts: NodeFacts,
              sources: EnvSources) -> str | None:
    """The value, or None when an optional source is missing (the variable is then not set)."""
    if var.value or var.value_from is None:
        return expand(var.value, env)
    src = var.value_from
    if src.field_ref is not None:
        return field_value(src.field_ref, pod, facts)
    if src.resource_field_ref is not None:
        return resource_value(src.resource_field_ref, pod, container, facts)
    if src.config_map_key_ref is not None:
        ref = src.config_map_key_ref
        cm = sources.config_maps.get(ref.name)
        if cm is None:
            if ref.optional:
                return None
            raise EnvResolutionError(f'configmap "{ref.name}" not found')
        if ref.key not in cm:
            if ref.optional:
                return None
            raise EnvResolutionError(f"couldn't find key {ref.key} in ConfigMap {pod.metadata.namespace}/{ref.name}")
        return cm[ref.key]
    if src.secret_key_ref is not None:
        sref = src.secret_key_ref
        secret = sources.secrets.get(sref.name)
        if secret is None:
            if sref.optional:
                return None
            raise EnvResolutionError(f'secret "{sref.name}" not found')
        if sref.key not in secret:
            if sref.optional:
                return None
            raise EnvResolutionError(f"couldn't find key {sref.key} in Secret {pod.metadata.namespace}/{sref.name}")
        return secret[sref.key].decode("utf-8", "replace")
    return ""


def field_value(ref: ObjectFieldSelector, pod: Pod, facts: NodeFacts) -> str:
    """podFieldSelectorRuntimeValue + fieldpath.ExtractFieldPathAsString."""
    path = ref.field_path
    split = split_subscript(path)
    if split is not None:
        base, key = split
        if base == "metadata.labels":
            return pod.metadata.labels.get(key, "")
        if base == "metadata.annotations":
            return pod.metadata.annotations.get(key, "")
        raise EnvResolutionError(f"fieldPath {path!r} does not support subscript")
    simple = {
        "metadata.name": pod.metadata.name,
        "metadata.namespace": pod.metadata.namespace,
        "metadata.uid": pod.metadata.uid,
        "spec.nodeName": pod.spec.node_name or facts.node_name,
        "spec.serviceAccountName": pod.spec.service_account_name or "",
        "status.hostIP": facts.host_ips[0] if facts.host_ips else "",
        "status.hostIPs": ",".join(facts.host_ips),
        "status.podIP": facts.pod_ips[0] if facts.pod_ips else "",
        "status.podIPs": ",".join(facts.pod_ips),
    }
    if path not in simple:
        raise EnvResolutionError(f"unsupported fieldPath: {path}")
    return simple[path]


def _find_container(pod: Pod, name: str) -> Container:
    for c in [*pod.spec.containers, *pod.spec.init_containers]:
        if c.name == name:
            return c
    raise EnvResolutionError(f"container {name} not found")


def resource_value(ref: ResourceFieldSelector, pod: Pod, container: Container, facts: NodeFacts) -> str:
    """ExtractContainerResourceValue on the container with limits defaulted to the node's allocatable."""
    target = _find_container(pod, ref.container_name) if ref.container_name else container
    kind, _, resource = ref.resource.partition(".")
    if kind == "limits":
        amounts: Mapping[str, Quantity] = target.limits
        if resource in _LIMIT_DEFAULTED and resource not in amounts and resource in facts.allocatable:
            amounts = {**amounts, resource: facts.allocatable[resource]}
    elif kind == "requests":
        amounts = target.requests
    else:
        raise EnvResolutionError(f"unsupported container resource: {ref.resource}")
    amount = amounts.get(resource, Quantity(0))
    return str(divide_ceil(amount, ref.effective_divisor, cpu=resource == "cpu"))


def divide_ceil(amount: Quantity, divisor: Quantity, *, cpu: bool) -> int:
    """ceil(amount / divisor): cpu on millicores (convertResourceCPUToString), the rest on whole units."""
    if cpu:
        num, den = amount.milli_value(), divisor.milli_value()
    else:
        num, den = amount.value(), divisor.value()
    if den <= 0:
        raise EnvResolutionError(f"divisor {divisor} must be positive")
    return -(-num // den)
