"""Pods that name an image are refused until the agent runs images (issue 16), unless the pod
opts into host mode.

A container here is a host process: its `image` would be ignored and its command run on the host,
as whatever user it names (root by default). Accepting such a manifest silently is the most
dangerous thing the agent could do with it, so it is a 422 naming the field; the annotation
`nodeagent.io/host-process: "true"` says "run the command on the host, I know" explicitly.
"""

from __future__ import annotations

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod

HOST_PROCESS_ANNOTATION = "nodeagent.io/host-process"


def refuse_images(pod: Pod) -> None:
    """ValidationErrors naming every container's `image`, unless the pod opts into host mode."""
    if (pod.metadata.annotations or {}).get(HOST_PROCESS_ANNOTATION) == "true":
        return
    errors = [
        FieldError(f"spec.{kind}[{i}].image",
                   f"this node runs containers as host processes and cannot run images yet; remove "
                   f"`image`, or annotate the pod {HOST_PROCESS_ANNOTATION}: \"true\" to run the "
                   "command on the host")
        for kind, containers in (("initContainers", pod.spec.init_containers), ("containers", pod.spec.containers))
        for i, c in enumerate(containers) if c.image
    ]
    if errors:
        raise ValidationErrors(errors)
