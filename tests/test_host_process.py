"""What a node runs of a pod naming images: refused (each image field named) without an OCI
runtime, unless the pod opts into host mode; exec handlers of image containers accepted (they run
through the runtime's `exec`)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.pods.host_process import HOST_PROCESS_ANNOTATION, refuse_images, runs_image
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod


def pod(*, image: bool, init_image: bool = False, annotations: dict[str, str] | None = None,
        command: bool = True, **extra: Any) -> Any:
    c: dict[str, Any] = {"name": "app", **({"command": ["sleep", "1"]} if command else {}),
                         **({"image": "busybox:1"} if image else {}), **extra}
    i: dict[str, Any] = {"name": "init", "command": ["true"], **({"image": "busybox:1"} if init_image else {})}
    meta: dict[str, Any] = {"name": "p", "namespace": "default", **({"annotations": annotations} if annotations else {})}
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                      "spec": {"initContainers": [i], "containers": [c]}})


HOST = {HOST_PROCESS_ANNOTATION: "true"}
EXEC = {"exec": {"command": ["true"]}}


@pytest.mark.parametrize(
    ("p", "runtime", "fields"),
    [
        (pod(image=False), None, []),
        (pod(image=True), None, ["spec.containers[0].image"]),
        (pod(image=True, init_image=True), None, ["spec.initContainers[0].image", "spec.containers[0].image"]),
        (pod(image=True, init_image=True, annotations=HOST), None, []),
        (pod(image=True, annotations={HOST_PROCESS_ANNOTATION: "yes"}), None, ["spec.containers[0].image"]),
        (pod(image=True, annotations={HOST_PROCESS_ANNOTATION: "false"}), None, ["spec.containers[0].image"]),
        # with a runtime, images run; a host-process pod still needs a command for every container
        (pod(image=True, init_image=True), "runc", []),
        (pod(image=True, command=False), "runc", []),
        (pod(image=True, command=False, annotations=HOST), "runc", ["spec.containers[0].command"]),
        # exec handlers of image containers run inside them (the runtime's exec): accepted
        (pod(image=True, livenessProbe=EXEC, readinessProbe={"httpGet": {"port": 80}}), "runc", []),
        (pod(image=True, lifecycle={"postStart": EXEC, "preStop": EXEC}), "runc", []),
        (pod(image=True, livenessProbe=EXEC), None, ["spec.containers[0].image"]),
        (pod(image=False, livenessProbe=EXEC), "runc", []),
    ],
)
def test_refuse_images(p: Any, runtime: str | None, fields: list[str]) -> None:
    if not fields:
        refuse_images(p, runtime)
        return
    with pytest.raises(ValidationErrors) as e:
        refuse_images(p, runtime)
    assert [err.path for err in e.value.errors] == fields
    if runtime is None:
        assert all(HOST_PROCESS_ANNOTATION in err.message and "ociRuntime" in err.message for err in e.value.errors)


def test_runs_image() -> None:
    p, h = pod(image=True), pod(image=True, annotations=HOST)
    assert runs_image(p, p.spec.containers[0])
    assert not runs_image(p, p.spec.init_containers[0])
    assert not runs_image(h, h.spec.containers[0])
