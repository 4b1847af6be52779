"""What this node can run of a pod's containers: from images (the OCI runtime) or as host processes.

A container that names an `image` runs from it, through the OCI runtime the agent chose at start
(config `ociRuntime`). Without one (`ociRuntime: none`, or none found) it is a 422 naming the
field: running its command on the host instead, as whatever user it names (root by default),
would be the most dangerous thing the agent could do with it. The annotation
`nodeagent.io/host-process: "true"` says "run the command on the host, I know": the image is then
ignored, so every container needs a `command`.

Exec probes and exec lifecycle hooks of image containers run inside the container, through the
runtime's `exec` (probes/exec_probe.py). Volumes this node cannot provide, and any volumeMount of
a host-process container, are refused (volume_plan.node_volume_errors).
"""

from __future__ import annotations

from nodeagent.agent.pods.volume_plan import node_volume_errors
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod
from nodeagent.core.model.pod import Container

HOST_PROCESS_ANNOTATION = "nodeagent.io/host-process"


def is_host_process_pod(pod: Pod) -> bool:
    return (pod.metadata.annotations or {}).get(HOST_PROCESS_ANNOTATION) == "true"


def runs_image(pod: Pod, c: Container) -> bool:
    """The container runs from its image (by the OCI runtime), not as a host process."""
    return bool(c.image) and not is_host_process_pod(pod)


def refuse_images(pod: Pod, runtime: str | None) -> None:
    """ValidationErrors naming every field this node cannot honour; `runtime`: the OCI runtime's
    name (None: the agent has none, so no image runs)."""
    host = is_host_process_pod(pod)
    errors: list[FieldError] = []
    for kind, containers in (("initContainers", pod.spec.init_containers), ("containers", pod.spec.containers)):
        for i, c in enumerate(containers):
            path = f"spec.{kind}[{i}]"
            if host:
                if not c.command:
                    errors.append(FieldError(f"{path}.command", "Required value: a host-process pod runs `command` "
                                                                "on the host; the image's entrypoint is not used"))
            elif c.image and runtime is None:
                errors.append(FieldError(
                    f"{path}.image",
                    "this node has no OCI runtime (ociRuntime: none, or none found) and cannot run images; "
                    f"remove `image`, or annotate the pod {HOST_PROCESS_ANNOTATION}: \"true\" to run the "
                    "command on the host"))
    errors += node_volume_errors(pod, lambda c: runs_image(pod, c))
    if errors:
        raise ValidationErrors(errors)
