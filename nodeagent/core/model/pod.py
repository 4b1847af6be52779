"""The Pod object: a Kubernetes-shaped manifest subset, parsed, defaulted and validated.

Containers run `command` + `args` as host processes (there are no images), so `command` is
required. Unknown fields are errors naming the field, so typos cannot pass silently; the few
Kubernetes fields that mean nothing here (image, ports, probes, volumes...) are accepted and kept
as opaque data, and server-populated metadata and `status` are accepted and dropped.
Checks that span fields, defaulting and error conversion live in validation.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nodeagent.core.names import (
    env_var_name_errors,
    invalid,
    quote,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_uid,
)
from nodeagent.core.quantity import Quantity, QuantityField

SYSTEM_CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_NODE_CRITICAL = "system-node-critical"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
# What the Priority admission plugin resolves the built-in classes to when `priority` is absent.
BUILTIN_PRIORITY_CLASSES = {
    SYSTEM_CLUSTER_CRITICAL: SYSTEM_CRITICAL_PRIORITY,
    SYSTEM_NODE_CRITICAL: SYSTEM_CRITICAL_PRIORITY + 1000,
}
# ObjectMeta fields the API server fills in; meaningless here, accepted and dropped.
_IGNORED_METADATA = frozenset(
    {"resourceVersion", "generation", "selfLink", "managedFields", "ownerReferences",
     "finalizers", "generateName", "deletionTimestamp", "deletionGracePeriodSeconds"}
)


def _checked(check: Callable[[str], None]) -> AfterValidator:
    def run(value: str) -> str:
        check(value)
        return value

    return AfterValidator(run)


def _one_of(*allowed: str) -> BeforeValidator:
    """Kubernetes' NotSupported error instead of pydantic's literal message."""

    def run(value: object) -> object:
        if not isinstance(value, str) or value not in allowed:
            raise PydanticCustomError(
                "not_supported",
                "Unsupported value: {value}: supported values: {supported}",
                {"value": quote(value), "supported": ", ".join(quote(a) for a in allowed)},
            )
        return value

    return BeforeValidator(run)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("invalid", "Invalid value: {v}: must not contain NUL", {"v": quote(value)})
    return value


def _env_name(value: str) -> str:
    errs = env_var_name_errors(value)
    if errs:
        raise PydanticCustomError("invalid", "{m}", {"m": invalid(value, "; ".join(errs))})
    return value


def _require_command(value: list[str]) -> list[str]:
    if not value:
        raise PydanticCustomError(
            "required",
            "Required value: command is required (containers run as host processes: there is no "
            "image entrypoint to fall back on)",
        )
    return value


def _at_least_one_container(value: list[Any]) -> list[Any]:
    if not value:
        raise PydanticCustomError("required", "Required value: a pod needs at least one container")
    return value


def _empty_to_none(value: object) -> object:
    return None if value == {} else value


Subdomain = Annotated[str, _checked(validate_dns1123_subdomain)]
Label = Annotated[str, _checked(validate_dns1123_label)]
Uid = Annotated[str, _checked(validate_uid)]
Text = Annotated[str, AfterValidator(_no_nul)]
Int32 = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
UserId = Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)]
Opaque = Annotated[dict[str, Any] | None, BeforeValidator(_empty_to_none)]
RestartPolicy = Annotated[Literal["Always", "OnFailure", "Never"], _one_of("Always", "OnFailure", "Never")]
TolerationOperator = Annotated[Literal["Exists", "Equal"], _one_of("Exists", "Equal")]
TaintEffect = Annotated[
    Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""],
    _one_of("NoSchedule", "PreferNoSchedule", "NoExecute", ""),
]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class EnvVar(_Model):
    name: Annotated[str, AfterValidator(_env_name)]
    value: Text = ""


class ResourceRequirements(_Model):
    """After parse_pod: a limit without a request has set the request (Kubernetes defaulting)."""

    requests: dict[str, QuantityField] = {}
    limits: dict[str, QuantityField] = {}


class Container(_Model):
    name: Label
    command: Annotated[
        list[Text], Field(default_factory=list, validate_default=True), AfterValidator(_require_command)
    ]
    args: list[Text] = []
    env: list[EnvVar] = []
    working_dir: Text | None = None
    resources: ResourceRequirements = ResourceRequirements()
    # Kubernetes fields with no meaning here: kept as given, never acted on.
    image: str | None = None
    image_pull_policy: str | None = None
    ports: list[dict[str, Any]] = []
    volume_mounts: list[dict[str, Any]] = []
    liveness_probe: Opaque = None
    readiness_probe: Opaque = None

    @property
    def requests(self) -> dict[str, Quantity]:
        return self.resources.requests

    @property
    def limits(self) -> dict[str, Quantity]:
        return self.resources.limits


class SecurityContext(_Model):
    run_as_user: UserId | None = None
    run_as_group: UserId | None = None


class Toleration(_Model):
    key: str | None = None
    operator: TolerationOperator = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: Annotated[int, Field(strict=True)] | None = None


class PodSpec(_Model):
    containers: Annotated[list[Container], AfterValidator(_at_least_one_container)]
    restart_policy: RestartPolicy = "Always"
    priority: Int32 = 0
    priority_class_name: Subdomain | None = None
    termination_grace_period_seconds: NonNegInt = 30
    security_context: SecurityContext | None = None
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    node_name: Subdomain | None = None
    volumes: list[dict[str, Any]] = []  # opaque, so that volumeMounts stay meaningful to readers

    @model_validator(mode="before")
    @classmethod
    def _resolve_builtin_priority(cls, data: Any) -> Any:
        """The API server sets `priority` from the built-in system classes; so do we."""
        if isinstance(data, dict) and "priority" not in data:
            name = data.get("priorityClassName", data.get("priority_class_name"))
            if isinstance(name, str) and name in BUILTIN_PRIORITY_CLASSES:
                return {**data, "priority": BUILTIN_PRIORITY_CLASSES[name]}
        return data


class ObjectMeta(_Model):
    name: Subdomain
    namespace: Label = "default"
    uid: Annotated[Uid, Field(default_factory=lambda: str(uuid.uuid4()))]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_server_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and _IGNORED_METADATA.intersection(data):
            return {k: v for k, v in data.items() if k not in _IGNORED_METADATA}
        return data


class Pod(_Model):
    api_version: Annotated[Literal["v1"], _one_of("v1")]
    kind: Annotated[Literal["Pod"], _one_of("Pod")]
    metadata: ObjectMeta
    spec: PodSpec

    @model_validator(mode="before")
    @classmethod
    def _drop_status(cls, data: Any) -> Any:
        """`kubectl get -o yaml` output carries a status; the status here is ours, not the input's."""
        if isinstance(data, dict) and "status" in data:
            return {k: v for k, v in data.items() if k != "status"}
        return data

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def to_dict(self) -> dict[str, Any]:
        """Kubernetes-shaped camelCase dict: quantities as canonical strings, no None or empties."""
        out = _dump(self)
        assert isinstance(out, dict)
        return out


def _dump(obj: object) -> object:
    if isinstance(obj, BaseModel):
        out: dict[str, object] = {}
        for name, field in type(obj).model_fields.items():
            value = getattr(obj, name)
            if value is None or (isinstance(value, (list, dict)) and not value):
                continue
            if isinstance(value, BaseModel) and value == field.default:
                continue  # e.g. resources: {} (parsing it back gives the same default)
            out[field.alias or name] = _dump(value)
        return out
    if isinstance(obj, list):
        return [_dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    if isinstance(obj, Quantity):
        return str(obj)
    if isinstance(obj, datetime):
        if obj.tzinfo is not None and obj.utcoffset() == UTC.utcoffset(None):
            return obj.replace(tzinfo=None).isoformat() + "Z"
        return obj.isoformat()
    return obj
