"""Pod objects: Kubernetes-shaped manifests parsed into frozen pydantic models.

`parse_pod(manifest)` is the way in; it validates, applies Kubernetes defaulting and raises
`nodeagent.core.errors.ValidationErrors` naming every bad field.
"""

from nodeagent.core.model.pod import (
    BUILTIN_PRIORITY_CLASSES,
    SYSTEM_CLUSTER_CRITICAL,
    SYSTEM_CRITICAL_PRIORITY,
    SYSTEM_NODE_CRITICAL,
    Container,
    EnvVar,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
    SecurityContext,
    Toleration,
)
from nodeagent.core.model.validation import default_requests, parse_pod, pod_errors

__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "SYSTEM_CLUSTER_CRITICAL",
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_NODE_CRITICAL",
    "Container",
    "EnvVar",
    "ObjectMeta",
    "Pod",
    "PodSpec",
    "ResourceRequirements",
    "SecurityContext",
    "Toleration",
    "default_requests",
    "parse_pod",
    "pod_errors",
]
