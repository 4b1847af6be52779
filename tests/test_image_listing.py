"""What the kubelet reports of images (pure): a container's imageID (containerd's repo digest of
the spec's repository) and the Node's status.images."""

from __future__ import annotations

import pytest

from nodeagent.agent.images.listing import image_id, node_images
from nodeagent.agent.images.records import ImageConfig, ImageRecord

IDX, MAN, OTHER = "sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64
CONFIG_ID = "sha256:" + "c" * 64


def record(digests: tuple[str, ...] = (), tags: tuple[str, ...] = (), size: int = 10) -> ImageRecord:
    return ImageRecord(id=CONFIG_ID, manifest_digest=MAN, manifest_size=size - 1, config_size=1, layers=(),
                       config=ImageConfig(), repo_tags=tags, repo_digests=digests)


@pytest.mark.parametrize("digests, image, expected", [
    # the digest the tag resolved to (a manifest list's own), not the platform manifest's after it
    ((f"reg.example/app@{IDX}", f"reg.example/app@{MAN}"), "reg.example/app:1", f"reg.example/app@{IDX}"),
    # the spec names a digest: that one
    ((f"reg.example/app@{IDX}", f"reg.example/app@{MAN}"), f"reg.example/app@{MAN}", f"reg.example/app@{MAN}"),
    # the same image under two repositories: the spec's repository
    ((f"reg.example/other@{OTHER}", f"reg.example/app@{IDX}"), "reg.example/app:1", f"reg.example/app@{IDX}"),
    # Docker Hub short names are normalized first
    ((f"docker.io/library/busybox@{IDX}",), "busybox", f"docker.io/library/busybox@{IDX}"),
    # a repository the image is not known under: its first repo digest
    ((f"reg.example/other@{OTHER}",), "reg.example/app:1", f"reg.example/other@{OTHER}"),
    # imported without a registry: the image id
    ((), "reg.example/app:1", CONFIG_ID),
    ((), "not a reference!", CONFIG_ID),
])
def test_image_id(digests: tuple[str, ...], image: str, expected: str) -> None:
    assert image_id(record(digests), image) == expected


def test_node_images_names_digests_then_tags_largest_first() -> None:
    small = record((f"reg.example/a@{IDX}",), ("reg.example/a:1",), size=5)
    big = record((f"reg.example/b@{OTHER}",), ("reg.example/b:1", "reg.example/b:2"), size=50)
    unnamed = record(size=100)
    assert node_images([small, unnamed, big]) == [
        {"names": [f"reg.example/b@{OTHER}", "reg.example/b:1", "reg.example/b:2"], "sizeBytes": 50},
        {"names": [f"reg.example/a@{IDX}", "reg.example/a:1"], "sizeBytes": 5}]
