"""Container environment: `env` (literal values and `valueFrom`) and `envFrom`, with Kubernetes' checks.

valueFrom is exactly one of fieldRef (the downward API: metadata.name, metadata.namespace,
metadata.uid, metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
spec.serviceAccountName, status.hostIP(s), status.podIP(s)), resourceFieldRef (a container's
requests/limits of cpu, memory, ephemeral-storage or hugepages-*, with a divisor), configMapKeyRef
or secretKeyRef. envFrom entries name one ConfigMap or Secret, with an optional prefix. Resolving
the values is nodeagent.core.downward's job; this module only says what may be written.
"""

from __future__ import annotations

import re
from typing import ClassVar

from nodeagent.core.errors import FieldError
from nodeagent.core.model.base import EnvName, KubeModel, Text
from nodeagent.core.names import (
    dns1123_subdomain_errors,
    env_var_name_errors,
    invalid,
    qualified_name_errors,
    quote,
)
from nodeagent.core.quantity import Quantity, QuantityField

ENV_FIELD_PATHS = (
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
    "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)
SUBSCRIPTED_FIELD_PATHS = ("metadata.annotations", "metadata.labels")
ENV_RESOURCES = (
    "limits.cpu", "limits.ephemeral-storage", "limits.memory",
    "requests.cpu", "requests.ephemeral-storage", "requests.memory",
)
HUGEPAGES_RESOURCE_PREFIXES = ("limits.hugepages-", "requests.hugepages-")
_CPU_DIVISORS = frozenset({"1m", "1"})
_BYTE_DIVISORS = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
_BYTE_DIVISOR_TEXT = ", ".join(_BYTE_DIVISORS)
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MAX = 253
_CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_SUBSCRIPT = re.compile(r"^([^\[]+)\['(.*)'\]$", re.DOTALL)


class ObjectFieldSelector(KubeModel):
    _written_when_set: ClassVar[frozenset[str]] = frozenset({"api_version"})

    api_version: str = "v1"
    field_path: str


class ResourceFieldSelector(KubeModel):
    container_name: str | None = None
    resource: str
    divisor: QuantityField | None = None

    @property
    def effective_divisor(self) -> Quantity:
        """An unset or zero divisor means 1, as the kubelet reads it."""
        if self.divisor is None or self.divisor.is_zero():
            return Quantity.from_value(1)
        return self.divisor


class ConfigMapKeySelector(KubeModel):
    name: str = ""
    key: str
    optional: bool | None = None


class SecretKeySelector(KubeModel):
    name: str = ""
    key: str
    optional: bool | None = None


class EnvVarSource(KubeModel):
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    secret_key_ref: SecretKeySelector | None = None


class EnvVar(KubeModel):
    name: EnvName
    value: Text = ""
    value_from: EnvVarSource | None = None

    def omitted_fields(self) -> frozenset[str]:
        """`value: ""` is written as before, except beside a valueFrom that the manifest gave alone."""
        if self.value_from is not None and not self.value and "value" not in self.model_fields_set:
            return frozenset({"value"})
        return frozenset()


class ConfigMapEnvSource(KubeModel):
    name: str = ""
    optional: bool | None = None


class SecretEnvSource(KubeModel):
    name: str = ""
    optional: bool | None = None


class EnvFromSource(KubeModel):
    prefix: str | None = None
    config_map_ref: ConfigMapEnvSource | None = None
    secret_ref: SecretEnvSource | None = None


def split_subscript(path: str) -> tuple[str, str] | None:
    """fieldpath.SplitMaybeSubscriptedPath: "metadata.labels['app']" -> ("metadata.labels", "app")."""
    m = _SUBSCRIPT.match(path)
    return (m.group(1), m.group(2)) if m else None


def field_ref_errors(path: str, ref: ObjectFieldSelector) -> list[FieldError]:
    """validateObjectFieldSelector with the env var expressions."""
    where = f"{path}.fieldPath"
    if not ref.api_version:
        return [FieldError(f"{path}.apiVersion", "Required value")]
    if not ref.field_path:
        return [FieldError(where, "Required value")]
    if ref.api_version != "v1":
        return [FieldError(where, invalid(ref.field_path,
                                          f"error converting fieldPath: unsupported pod version: {ref.api_version}"))]
    split = split_subscript(ref.field_path)
    if split is not None:
        base, key = split
        if base not in SUBSCRIPTED_FIELD_PATHS:
            return [FieldError(where, invalid(ref.field_path, "does not support subscript"))]
        errs = qualified_name_errors(key.lower() if base == "metadata.annotations" else key)
        return [FieldError(where, invalid(key, e)) for e in errs]
    if ref.field_path not in ENV_FIELD_PATHS:
        supported = ", ".join(quote(p) for p in sorted(ENV_FIELD_PATHS))
        return [FieldError(where, f"Unsupported value: {quote(ref.field_path)}: supported values: {supported}")]
    return []


def resource_field_ref_errors(path: str, ref: ResourceFieldSelector) -> list[FieldError]:
    """validateContainerResourceFieldSelector (env: containerName may be empty) and the divisor."""
    if not ref.resource:
        return [FieldError(f"{path}.resource", "Required value")]
    hugepages = ref.resource.startswith(HUGEPAGES_RESOURCE_PREFIXES)
    if ref.resource not in ENV_RESOURCES and not hugepages:
        supported = ", ".join(quote(r) for r in ENV_RESOURCES)
        message = f"Unsupported value: {quote(ref.resource)}: supported values: {supported}"
        return [FieldError(f"{path}.resource", message)]
    if ref.divisor is None or ref.divisor.is_zero():
        return []
    text = str(ref.divisor)
    kind = ref.resource.split(".", 1)[1]
    if kind == "cpu" and text not in _CPU_DIVISORS:
        detail = "only divisor's values 1m and 1 are supported with the cpu resource"
    elif kind != "cpu" and text not in _BYTE_DIVISORS:
        what = {"memory": "memory", "ephemeral-storage": "local ephemeral storage"}.get(kind, "hugepages")
        detail = f"only divisor's values {_BYTE_DIVISOR_TEXT} are supported with the {what} resource"
    else:
        return []
    return [FieldError(f"{path}.divisor", invalid(ref.resource, detail))]


def _object_name_errors(path: str, name: str) -> list[FieldError]:
    if not name:
        return [FieldError(f"{path}.name", "Required value")]
    return [FieldError(f"{path}.name", invalid(name, e)) for e in dns1123_subdomain_errors(name)]


def _key_errors(path: str, key: str) -> list[FieldError]:
    if not key:
        return [FieldError(f"{path}.key", "Required value")]
    errs = []
    if len(key) > _CONFIG_KEY_MAX:
        errs.append(FieldError(f"{path}.key", invalid(key, f"must be no more than {_CONFIG_KEY_MAX} characters")))
    if not _CONFIG_KEY.fullmatch(key):
        errs.append(FieldError(f"{path}.key", invalid(key, _CONFIG_KEY_MSG)))
    elif key in (".", "..") or key.startswith(".."):
        errs.append(FieldError(f"{path}.key", invalid(key, "must not be '.' or '..' or start with '..'")))
    return errs


def env_var_errors(path: str, var: EnvVar) -> list[FieldError]:
    """validateEnvVarValueFrom for one env[i]."""
    src = var.value_from
    if src is None:
        return []
    where = f"{path}.valueFrom"
    errs: list[FieldError] = []
    sources = 0
    if src.field_ref is not None:
        sources += 1
        errs += field_ref_errors(f"{where}.fieldRef", src.field_ref)
    if src.resource_field_ref is not None:
        sources += 1
        errs += resource_field_ref_errors(f"{where}.resourceFieldRef", src.resource_field_ref)
    if src.config_map_key_ref is not None:
        sources += 1
        ref = src.config_map_key_ref
        errs += _object_name_errors(f"{where}.configMapKeyRef", ref.name)
        errs += _key_errors(f"{where}.configMapKeyRef", ref.key)
    if src.secret_key_ref is not None:
        sources += 1
        sref = src.secret_key_ref
        errs += _object_name_errors(f"{where}.secretKeyRef", sref.name)
        errs += _key_errors(f"{where}.secretKeyRef", sref.key)
    if sources == 0:
        errs.append(FieldError(where, invalid(
            "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")))
    elif var.value:
        errs.append(FieldError(where, invalid("", "may not be specified when `value` is not empty")))
    elif sources > 1:
        errs.append(FieldError(where, invalid("", "may not have more than one field specified at a time")))
    return errs


def env_from_errors(path: str, sources: list[EnvFromSource]) -> list[FieldError]:
    """validateEnvFrom."""
    errs: list[FieldError] = []
    for i, src in enumerate(sources):
        where = f"{path}[{i}]"
        if src.prefix:
            errs += [FieldError(f"{where}.prefix", invalid(src.prefix, e)) for e in env_var_name_errors(src.prefix)]
        count = 0
        if src.config_map_ref is not None:
            count += 1
            errs += _object_name_errors(f"{where}.configMapRef", src.config_map_ref.name)
        if src.secret_ref is not None:
            count += 1
            errs += _object_name_errors(f"{where}.secretRef", src.secret_ref.name)
        if count == 0:
            errs.append(FieldError(where, invalid("", "must specify one of: `configMapRef` or `secretRef`")))
        elif count > 1:
            errs.append(FieldError(where, invalid("", "may not have more than one field specified at a time")))
    return errs
