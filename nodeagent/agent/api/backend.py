"""What the HTTP API needs from the agent, and the errors the agent raises to it.

The API only translates HTTP to these calls and exceptions to Kubernetes Status objects; the pod
manager (or a fake in tests) implements the protocol.
"""

from __future__ import annotations

from typing import Any, Protocol

from nodeagent.agent.pods.errors import AdmissionError, AlreadyExists, DurabilityError
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.runtime.attach import AttachTarget
from nodeagent.agent.runtime.logs import LogSource

__all__ = ["AdmissionError", "AgentBackend", "AlreadyExists", "DurabilityError"]


class AgentBackend(Protocol):
    def node(self) -> dict[str, Any]:
        """The Node object (see nodeagent.agent.node.status.build_node)."""
        ...

    def list_pods(self) -> list[dict[str, Any]]:
        """Every pod on the node, Kubernetes-shaped, with status."""
        ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Validate, admit and start a pod; returns it with status.

        Raises nodeagent.core.errors.ValidationErrors (or FieldError), AdmissionError, AlreadyExists.
        """
        ...

    async def resize_pod(self, namespace: str, name: str, patch: dict[str, Any],
                         patch_type: str) -> dict[str, Any] | None:
        """The pods/resize subresource: apply a strategic-merge or merge patch (`patch_type`, its
        media type) of the containers' resources in place; the pod with its status, None if there
        is no such pod. Raises ValidationErrors or FieldError (422), DurabilityError."""
        ...

    async def delete_pod(self, namespace: str, name: str,
                         grace_period: int | None) -> dict[str, Any] | None:
        """Begin terminating the pod; None if there is no such pod."""
        ...

    def log_source(self, namespace: str, name: str, container: str | None,
                   previous: bool) -> LogSource | None:
        """Where the container's log is (the only app container if None; the run before the
        current one with `previous`) and whether its run still writes to it. None if the pod or
        container is unknown; FieldError (400) if no container is named in a pod with several;
        LogUnavailable (400) if there is no such log yet."""
        ...

    def attach_target(self, namespace: str, name: str, container: str | None) -> AttachTarget | None:
        """Where `kubectl attach` reads and writes: the running container's log and its stdin FIFO
        (runtime/attach.py). None if the pod or container is unknown; FieldError if no container is
        named in a pod with several; AttachUnavailable or LogUnavailable if it is not running."""
        ...

    def exec_target(self, namespace: str, name: str, container: str | None) -> ExecTarget | None:
        """Where `kubectl exec` runs a command: the running container's cgroup, env, working
        directory and identity (the only app container if None). None if the pod or container is
        unknown; FieldError if no container is named in a pod with several; ExecUnavailable if
        the container is not running or cannot be exec'd into."""
        ...

    def events(self) -> list[dict[str, Any]]:
        """Recent events (Kubernetes Event objects), newest last."""
        ...

    async def reload_config(self) -> dict[str, Any]:
        """Re-read the config file: a ConfigReload object with ok, applied, restartRequired, errors."""
        ...
