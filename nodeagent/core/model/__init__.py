"""Pod objects: Kubernetes-shaped manifests parsed into frozen pydantic models.

`parse_pod(manifest)` is the way in; it validates, applies Kubernetes defaulting and raises
`nodeagent.core.errors.ValidationErrors` naming every bad field.

May import: the rest of core (errors, names, quantity...); nothing else of nodeagent.
"""

from nodeagent.core.model.env import EnvFromSource, EnvVar
from nodeagent.core.model.lifecycle import Lifecycle, LifecycleHandler
from nodeagent.core.model.pod import (
    BUILTIN_PRIORITY_CLASSES,
    SYSTEM_CLUSTER_CRITICAL,
    SYSTEM_CRITICAL_PRIORITY,
    SYSTEM_NODE_CRITICAL,
    Container,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
    SecurityContext,
    Toleration,
)
from nodeagent.core.model.probe import Probe
from nodeagent.core.model.validation import (
    checked_pod,
    default_requests,
    defaulted_spec,
    metadata_errors,
    parse_pod,
    pod_errors,
    spec_errors,
)

__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "SYSTEM_CLUSTER_CRITICAL",
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_NODE_CRITICAL",
    "Container",
    "EnvFromSource",
    "EnvVar",
    "Lifecycle",
    "LifecycleHandler",
    "ObjectMeta",
    "Pod",
    "PodSpec",
    "Probe",
    "ResourceRequirements",
    "SecurityContext",
    "Toleration",
    "checked_pod",
    "default_requests",
    "defaulted_spec",
    "metadata_errors",
    "parse_pod",
    "pod_errors",
    "spec_errors",
]
