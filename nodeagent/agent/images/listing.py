"""The images as the kubelet reports them in the Node's `status.images` (pure).

The kubelet (nodestatus.Images): images sorted by size, largest first, at most
nodeStatusMaxImages (50); each `{names, sizeBytes}` with the repo digests then the repo tags,
at most 5 names (maxNamesPerImageInNodeStatus). An image without any name is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.agent.images.records import ImageRecord
from nodeagent.agent.images.reference import ImageRef, parse_reference
from nodeagent.core.errors import FieldError
from nodeagent.core.timefmt import rfc3339

MAX_IMAGES = 50
MAX_NAMES = 5


def node_images(records: Sequence[ImageRecord], max_images: int = MAX_IMAGES) -> list[dict[str, Any]]:
    ordered = sorted(records, key=lambda r: (-r.size, r.id))
    out = []
    for record in ordered:
        names = list(record.names)[:MAX_NAMES]
        if not names:
            continue
        out.append({"names": names, "sizeBytes": record.size})
        if max_images >= 0 and len(out) >= max_images:
            break
    return out


def image_id(record: ImageRecord, image: str) -> str:
    """A container's `imageID` as the kubelet reports it from containerd: the repo digest
    (`registry/repository@sha256:...`) of the repository the spec's `image` names (its own digest
    when it names one), else the image's first repo digest, else (an imported image that never
    came from a registry) its id, `sha256:<config digest>`."""
    try:
        ref: ImageRef | None = parse_reference(image)
    except FieldError:
        ref = None
    if ref is not None:
        if ref.digest and ref.with_digest(ref.digest) in record.repo_digests:
            return ref.with_digest(ref.digest)
        for digest in record.repo_digests:
            if digest.partition("@")[0] == ref.name:
                return digest
    return record.repo_digests[0] if record.repo_digests else record.id


def image_object(record: ImageRecord, holders: Sequence[str] = ()) -> dict[str, Any]:
    """One image as the agent's API lists it (CRI's Image fields, camelCase)."""
    return {
        "id": record.id,
        "repoTags": list(record.repo_tags),
        "repoDigests": list(record.repo_digests),
        "size": record.size,
        "manifestDigest": record.manifest_digest,
        "layers": [{"digest": layer.digest, "diffID": layer.diff_id, "size": layer.size, "usage": layer.usage}
                   for layer in record.layers],
        "os": record.os,
        "architecture": record.architecture,
        "firstSeen": rfc3339(record.first_seen),
        "lastUsed": rfc3339(record.last_used),
        "inUseBy": list(holders),
        "config": {"entrypoint": list(record.config.entrypoint), "cmd": list(record.config.cmd),
                   "env": list(record.config.env), "workingDir": record.config.working_dir,
                   "user": record.config.user},
    }


__all__ = ["MAX_IMAGES", "MAX_NAMES", "image_id", "image_object", "node_images"]
