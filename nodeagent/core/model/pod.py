"""The Pod object: a Kubernetes-shaped manifest subset, parsed, defaulted and validated.

A container names an `image` (run by the OCI runtime: the image's Entrypoint/Cmd apply where
`command`/`args` are absent) or runs `command` + `args` as a host process, so `command` is
required when there is no image (validation.py). Unknown fields are errors naming the field, so
typos cannot pass silently; the few Kubernetes fields that mean nothing here yet (ports) are
accepted and kept as opaque data; volumes and volumeMounts stay plain dicts too, checked as the
API checks them (volume.py: a volume type this node lacks is still a valid pod for the server);
server-populated metadata and `status` are accepted and dropped. Probes, lifecycle hooks, env
sources and init containers are typed (probe.py, lifecycle.py, env.py).
Checks that span fields, defaulting and error conversion live in validation.py.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from nodeagent.core.model.base import (
    Int32,
    KubeModel,
    Label,
    NonNegInt,
    Subdomain,
    Text,
    Uid,
    UserId,
    dump,
    one_of,
)
from nodeagent.core.model.env import EnvFromSource, EnvVar
from nodeagent.core.model.lifecycle import Lifecycle
from nodeagent.core.model.probe import Probe
from nodeagent.core.quantity import Quantity, QuantityField

SYSTEM_CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_NODE_CRITICAL = "system-node-critical"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
# What the Priority admission plugin resolves the built-in classes to when `priority` is absent.
BUILTIN_PRIORITY_CLASSES = {
    SYSTEM_CLUSTER_CRITICAL: SYSTEM_CRITICAL_PRIORITY,
    SYSTEM_NODE_CRITICAL: SYSTEM_CRITICAL_PRIORITY + 1000,
}
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# ObjectMeta fields the API server fills in; meaningless here, accepted and dropped.
_IGNORED_METADATA = frozenset(
    {"resourceVersion", "generation", "selfLink", "managedFields", "ownerReferences",
     "finalizers", "generateName", "deletionTimestamp", "deletionGracePeriodSeconds"}
)


def _at_least_one_container(value: list[Any]) -> list[Any]:
    if not value:
        raise PydanticCustomError("required", "Required value: a pod needs at least one container")
    return value


RestartPolicy = Annotated[Literal["Always", "OnFailure", "Never"], one_of("Always", "OnFailure", "Never")]
# Container-level restartPolicy: only "Always", only on init containers (sidecars).
ContainerRestartPolicy = Annotated[Literal["Always"], one_of("Always")]
TerminationMessagePolicy = Annotated[
    Literal["File", "FallbackToLogsOnError"], one_of("File", "FallbackToLogsOnError")
]
TolerationOperator = Annotated[Literal["Exists", "Equal"], one_of("Exists", "Equal")]
TaintEffect = Annotated[
    Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""],
    one_of("NoSchedule", "PreferNoSchedule", "NoExecute", ""),
]


class ResourceRequirements(KubeModel):
    """After parse_pod: a limit without a request has set the request (Kubernetes defaulting)."""

    requests: dict[str, QuantityField] = {}
    limits: dict[str, QuantityField] = {}


ResizeResource = Annotated[Literal["cpu", "memory"], one_of("cpu", "memory")]
ResizeRestartPolicy = Annotated[
    Literal["NotRequired", "RestartContainer"], one_of("NotRequired", "RestartContainer")
]


class ContainerResizePolicy(KubeModel):
    """What an in-place resize of one resource does to the running container (KEP-1287)."""

    resource_name: ResizeResource
    restart_policy: ResizeRestartPolicy = "NotRequired"


class Container(KubeModel):
    name: Label
    command: list[Text] = []  # required unless `image` is set (validation.py): the image's Entrypoint applies
    args: list[Text] = []
    env: list[EnvVar] = []
    working_dir: Text | None = None
    resources: ResourceRequirements = ResourceRequirements()
    env_from: list[EnvFromSource] = []
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    lifecycle: Lifecycle | None = None
    termination_message_path: Text = DEFAULT_TERMINATION_MESSAGE_PATH
    termination_message_policy: TerminationMessagePolicy = "File"
    restart_policy: ContainerRestartPolicy | None = None  # init containers only: a sidecar
    resize_policy: list[ContainerResizePolicy] = []  # per resource: NotRequired (live) or RestartContainer
    image: str | None = None  # run from this image by the OCI runtime (unless the pod is a host-process pod)
    image_pull_policy: str | None = None
    ports: list[dict[str, Any]] = []  # no meaning here yet: kept as given, never acted on
    volume_mounts: list[dict[str, Any]] = []  # checked in validation.py (model/volume.py)
    stdin: bool = False  # the container reads a pipe `kubectl attach -i` writes to (agent/runtime/attach.py)
    stdin_once: bool = False  # its stdin ends with the first attach session's input (runtime/stdio_holder.py)
    tty: bool = False  # each run gets a terminal `kubectl attach -it` types into (runtime/stdio_holder.py)

    _written_when_set: ClassVar[frozenset[str]] = frozenset(
        {"termination_message_path", "termination_message_policy", "stdin", "stdin_once", "tty"}
    )

    @property
    def is_sidecar(self) -> bool:
        """A restartable init container (restartPolicy: Always)."""
        return self.restart_policy == "Always"

    def named_port(self, name: str) -> int | None:
        """The containerPort of `ports[].name == name` (ports stay opaque data)."""
        for port in self.ports:
            number = port.get("containerPort")
            if port.get("name") == name and type(number) is int:
                return number
        return None

    @property
    def requests(self) -> dict[str, Quantity]:
        return self.resources.requests

    @property
    def limits(self) -> dict[str, Quantity]:
        return self.resources.limits


class SecurityContext(KubeModel):
    run_as_user: UserId | None = None
    run_as_group: UserId | None = None


class Toleration(KubeModel):
    key: str | None = None
    operator: TolerationOperator = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: Annotated[int, Field(strict=True)] | None = None


class LocalObjectReference(KubeModel):
    """An imagePullSecrets entry: a Secret in the pod's namespace (an empty name, which the API
    admits, is skipped by the kubelet and here)."""

    name: str = ""


class PodSpec(KubeModel):
    containers: Annotated[list[Container], AfterValidator(_at_least_one_container)]
    init_containers: list[Container] = []
    restart_policy: RestartPolicy = "Always"
    priority: Int32 = 0
    priority_class_name: Subdomain | None = None
    termination_grace_period_seconds: NonNegInt = 30
    security_context: SecurityContext | None = None
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    node_name: Subdomain | None = None
    service_account_name: Subdomain | None = None
    volumes: list[dict[str, Any]] = []  # plain dicts, checked in validation.py (model/volume.py)
    image_pull_secrets: list[LocalObjectReference] = []

    @model_validator(mode="before")
    @classmethod
    def _resolve_builtin_priority(cls, data: Any) -> Any:
        """The API server sets `priority` from the built-in system classes; so do we."""
        if isinstance(data, dict) and "priority" not in data:
            name = data.get("priorityClassName", data.get("priority_class_name"))
            if isinstance(name, str) and name in BUILTIN_PRIORITY_CLASSES:
                return {**data, "priority": BUILTIN_PRIORITY_CLASSES[name]}
        return data


class ObjectMeta(KubeModel):
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


class Pod(KubeModel):
    api_version: Annotated[Literal["v1"], one_of("v1")]
    kind: Annotated[Literal["Pod"], one_of("Pod")]
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
        out = dump(self)
        assert isinstance(out, dict)
        return out
