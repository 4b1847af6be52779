"""A pod naming an image is refused (each image field named) unless it opts into host mode."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.pods.host_process import HOST_PROCESS_ANNOTATION, refuse_images
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod


def pod(*, image: bool, init_image: bool = False, annotations: dict[str, str] | None = None) -> Any:
    c: dict[str, Any] = {"name": "app", "command": ["sleep", "1"], **({"image": "busybox:1"} if image else {})}
    i: dict[str, Any] = {"name": "init", "command": ["true"], **({"image": "busybox:1"} if init_image else {})}
    meta: dict[str, Any] = {"name": "p", "namespace": "default", **({"annotations": annotations} if annotations else {})}
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                      "spec": {"initContainers": [i], "containers": [c]}})


@pytest.mark.parametrize(
    ("image", "init_image", "annotations", "fields"),
    [
        (False, False, None, []),
        (True, False, None, ["spec.containers[0].image"]),
        (True, True, None, ["spec.initContainers[0].image", "spec.containers[0].image"]),
        (True, True, {HOST_PROCESS_ANNOTATION: "true"}, []),
        (True, False, {HOST_PROCESS_ANNOTATION: "yes"}, ["spec.containers[0].image"]),  # "true" only
        (True, False, {HOST_PROCESS_ANNOTATION: "false"}, ["spec.containers[0].image"]),
    ],
)
def test_refuse_images(image: bool, init_image: bool, annotations: dict[str, str] | None, fields: list[str]) -> None:
    p = pod(image=image, init_image=init_image, annotations=annotations)
    if not fields:
        refuse_images(p)
        return
    with pytest.raises(ValidationErrors) as e:
        refuse_images(p)
    assert [err.path for err in e.value.errors] == fields
    assert all(HOST_PROCESS_ANNOTATION in err.message for err in e.value.errors)
