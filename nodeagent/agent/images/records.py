"""What the store knows of one image, as plain values (no I/O): the record written to disk, the
image config a container needs, and the parsing of OCI manifests and configs into them.

An image is identified by its config digest (as Docker and containerd do: the same content pulled
under two names is one image). Its `layers` are in manifest order, bottom first; each unpacked
layer is a directory named by its diff_id (the digest of the uncompressed tar), so two images that
share a layer share the directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nodeagent.agent.images.errors import BadLayer, PullFailed
from nodeagent.agent.images.reference import validate_digest
from nodeagent.agent.images.unpack import LAYER_TYPES
from nodeagent.core.errors import FieldError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
RECORD_VERSION = 1


@dataclass(frozen=True)
class ImageConfig:
    """The parts of the image config (OCI image-spec config.md `config`) that running a container
    needs: Kubernetes' `command` replaces Entrypoint and `args` replaces Cmd."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""
    stop_signal: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layer:
    digest: str  # the compressed blob
    media_type: str
    size: int  # of the blob
    diff_id: str  # of the uncompressed tar: names the unpacked directory
    usage: int = 0  # bytes the unpacked directory occupies (st_blocks)


@dataclass(frozen=True)
class ImageRecord:
    id: str  # the config digest
    manifest_digest: str
    manifest_size: int
    config_size: int
    layers: tuple[Layer, ...]
    config: ImageConfig
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    os: str = "linux"
    architecture: str = ""
    first_seen: float = 0.0  # wall seconds: first pulled or imported
    last_used: float = 0.0  # wall seconds: pulled, or leased by a container

    @property
    def size(self) -> int:
        """Bytes on imagefs that belong to this image: blobs plus unpacked layers (a layer shared
        with another image counts in both, as the kubelet's sizeBytes does)."""
        return self.manifest_size + self.config_size + sum(layer.size + layer.usage for layer in self.layers)

    def items(self) -> dict[str, int]:
        """Every piece on disk with its size: `blob:<digest>` and `layer:<diff_id>`."""
        out = {f"blob:{self.manifest_digest}": self.manifest_size, f"blob:{self.id}": self.config_size}
        for layer in self.layers:
            out[f"blob:{layer.digest}"] = layer.size
            out[f"layer:{layer.diff_id}"] = layer.usage
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return self.repo_digests + self.repo_tags

    def with_names(self, tags: Sequence[str] = (), digests: Sequence[str] = ()) -> ImageRecord:
        return replace(self, repo_tags=_merged(self.repo_tags, tags), repo_digests=_merged(self.repo_digests, digests))

    def to_json(self) -> bytes:
        data = asdict(self)
        data["version"] = RECORD_VERSION
        data["config"]["labels"] = dict(self.config.labels)
        return json.dumps(data, indent=1, sort_keys=True).encode()


def _merged(old: Sequence[str], new: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*old, *new]))


def record_from_json(data: bytes) -> ImageRecord:
    """Parse a record written by to_json; ValueError when it is not one."""
    raw = json.loads(data)
    if not isinstance(raw, dict) or raw.get("version") != RECORD_VERSION:
        raise ValueError("not an image record of this version")
    cfg = raw["config"]
    config = ImageConfig(tuple(cfg["entrypoint"]), tuple(cfg["cmd"]), tuple(cfg["env"]), cfg["working_dir"],
                         cfg["user"], cfg["stop_signal"], dict(cfg["labels"]))
    layers = tuple(Layer(lay["digest"], lay["media_type"], int(lay["size"]), lay["diff_id"], int(lay["usage"]))
                   for lay in raw["layers"])
    for layer in layers:
        validate_digest(layer.digest)
        validate_digest(layer.diff_id)
    return ImageRecord(validate_digest(raw["id"]), validate_digest(raw["manifest_digest"]), int(raw["manifest_size"]),
                       int(raw["config_size"]), layers, config, tuple(raw["repo_tags"]), tuple(raw["repo_digests"]),
                       raw["os"], raw["architecture"], float(raw["first_seen"]), float(raw["last_used"]))


# ---- OCI documents ----


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: Mapping[str, Any] = field(default_factory=dict)


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise PullFailed(f"{what} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise PullFailed(f"{what} is not a JSON object")
    return value


def descriptor(value: object, what: str) -> Descriptor:
    if not isinstance(value, dict):
        raise PullFailed(f"{what}: a descriptor must be an object")
    try:
        digest = validate_digest(str(value.get("digest")), f"{what}.digest")
    except FieldError as e:
        raise PullFailed(str(e)) from None
    size = value.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise PullFailed(f"{what}.size: must be an integer >= 0, got {size!r}")
    platform = value.get("platform")
    return Descriptor(str(value.get("mediaType") or ""), digest, size, platform if isinstance(platform, dict) else {})


def parse_index(data: bytes, what: str = "index.json") -> list[Descriptor]:
    """The manifests an OCI layout's index.json (or an image index) lists."""
    doc = _json_object(data, what)
    manifests = doc.get("manifests")
    if not isinstance(manifests, list):
        raise PullFailed(f"{what}: no manifests list")
    return [descriptor(m, f"{what}.manifests[{i}]") for i, m in enumerate(manifests)]


def select_platform(entries: Sequence[Descriptor], os_name: str, architecture: str) -> Descriptor:
    """The entry of an image index for this node's platform (the first match, as runtimes do)."""
    for entry in entries:
        if entry.platform.get("os") == os_name and entry.platform.get("architecture") == architecture:
            return entry
    have = ", ".join(f"{e.platform.get('os')}/{e.platform.get('architecture')}" for e in entries) or "none"
    raise PullFailed(f"no image for {os_name}/{architecture} in the image index (it has: {have})")


def parse_manifest(data: bytes, what: str) -> tuple[Descriptor, list[Descriptor]]:
    """(config, layers) of an image manifest; PullFailed for an index or anything unusable."""
    doc = _json_object(data, what)
    media_type = doc.get("mediaType") or OCI_MANIFEST
    if media_type in INDEX_TYPES or "manifests" in doc:
        raise PullFailed(f"{what} is an image index, not an image manifest")
    if media_type not in (OCI_MANIFEST, DOCKER_MANIFEST) or doc.get("schemaVersion") != 2:
        raise PullFailed(f"{what}: unsupported manifest type {media_type!r}")
    config = descriptor(doc.get("config"), f"{what}.config")
    layers_raw = doc.get("layers")
    if not isinstance(layers_raw, list):
        raise PullFailed(f"{what}.layers: must be a list")
    layers = [descriptor(v, f"{what}.layers[{i}]") for i, v in enumerate(layers_raw)]
    for i, layer in enumerate(layers):
        if layer.media_type not in LAYER_TYPES:
            raise BadLayer(f"{what}.layers[{i}]: unsupported layer media type {layer.media_type!r}")
    return config, layers


def _strings(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PullFailed(f"{what}: must be a list of strings")
    return tuple(value)


def parse_config(data: bytes, layer_count: int, what: str = "image config") -> tuple[ImageConfig, list[str], str, str]:
    """(config, diff_ids, os, architecture) of an image config blob."""
    doc = _json_object(data, what)
    rootfs = doc.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers":
        raise PullFailed(f"{what}.rootfs: must be an object of type \"layers\"")
    diff_ids = list(_strings(rootfs.get("diff_ids"), f"{what}.rootfs.diff_ids"))
    for i, d in enumerate(diff_ids):
        try:
            validate_digest(d, f"{what}.rootfs.diff_ids[{i}]")
        except FieldError as e:
            raise PullFailed(str(e)) from None
    if len(diff_ids) != layer_count:
        raise PullFailed(f"{what}.rootfs.diff_ids: {len(diff_ids)} entries for {layer_count} layers")
    cfg = doc.get("config") or {}
    if not isinstance(cfg, dict):
        raise PullFailed(f"{what}.config: must be an object")
    labels = cfg.get("Labels") or {}
    config = ImageConfig(
        entrypoint=_strings(cfg.get("Entrypoint"), f"{what}.config.Entrypoint"),
        cmd=_strings(cfg.get("Cmd"), f"{what}.config.Cmd"),
        env=_strings(cfg.get("Env"), f"{what}.config.Env"),
        working_dir=str(cfg.get("WorkingDir") or ""),
        user=str(cfg.get("User") or ""),
        stop_signal=str(cfg.get("StopSignal") or ""),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
    )
    return config, diff_ids, str(doc.get("os") or ""), str(doc.get("architecture") or "")


__all__ = ["Descriptor", "ImageConfig", "ImageRecord", "Layer", "parse_config", "parse_index", "parse_manifest",
           "record_from_json", "select_platform"]
