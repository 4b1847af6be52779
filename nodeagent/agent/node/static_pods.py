"""Static pods: Pod manifests in `staticPodPath`, run by the agent without any API call.

Like the kubelet's file source: the name gets `-<nodename>`, the namespace defaults to
"default", `spec.nodeName` is this node, a NoExecute toleration is added, and the annotations
`kubernetes.io/config.source: file` and `kubernetes.io/config.hash` are set. The hash (also
the uid when the manifest has none, so re-adoption after a restart finds the same pod) covers
the parsed manifest and the node name, so reformatting a file or renaming it does not restart
its pod, while any real edit does.

Unlike the kubelet, a file that turns bad keeps its last good pod running (reported as an
error) instead of killing it: an editor's half-written save must not take a pod down.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.wellknown import CONFIG_HASH as HASH_ANNOTATION
from nodeagent.core.wellknown import CONFIG_SOURCE as SOURCE_ANNOTATION
from nodeagent.core.wellknown import FILE_SOURCE
from nodeagent.daemonkit.yamlerrors import YamlProblem

log = structlog.get_logger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")
MAX_MANIFEST_BYTES = 10 << 20  # the kubelet's maxConfigLength


@dataclass(frozen=True)
class StaticPod:
    path: Path
    pod: Pod
    manifest: Mapping[str, Any]  # after the static-pod defaults, before parsing
    hash: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod.metadata.namespace, self.pod.metadata.name)


@dataclass(frozen=True)
class ManifestError:
    path: Path
    field: str  # "" when the file as a whole is the problem (unreadable, not YAML)
    message: str

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.path}: {where}{self.message}"


@dataclass(frozen=True)
class StaticPodDiff:
    added: list[StaticPod] = field(default_factory=list)
    changed: list[StaticPod] = field(default_factory=list)
    removed: list[StaticPod] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)


def static_defaults(doc: Mapping[str, Any], node_name: str) -> tuple[dict[str, Any], str]:
    """The manifest as the kubelet's file source rewrites it, and its config hash.
    Node names are lower-cased, as the kubelet does with the hostname."""
    node_name = node_name.lower()
    meta = doc.get("metadata")
    spec = doc.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return dict(doc), ""  # parse_pod names the missing/broken field
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode())
    digest.update(f"host:{node_name}".encode())
    config_hash = digest.hexdigest()[:32]
    tolerations = spec.get("tolerations")
    noexec = {"operator": "Exists", "effect": "NoExecute"}
    if isinstance(tolerations, list) and noexec not in tolerations:
        tolerations = [*tolerations, noexec]
    elif tolerations is None:
        tolerations = [noexec]
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations = {**annotations, SOURCE_ANNOTATION: FILE_SOURCE, HASH_ANNOTATION: config_hash}
    elif annotations is None:
        annotations = {SOURCE_ANNOTATION: FILE_SOURCE, HASH_ANNOTATION: config_hash}
    name = meta.get("name")
    new_meta = {**meta, "annotations": annotations,
                "namespace": meta.get("namespace") or "default",
                "uid": meta.get("uid") or config_hash}
    if isinstance(name, str) and name:
        new_meta["name"] = f"{name}-{node_name}"
    return {**doc, "metadata": new_meta,
            "spec": {**spec, "nodeName": node_name, "tolerations": tolerations}}, config_hash


def _load(path: Path) -> Any:
    """The single YAML/JSON document in the file; ValueError with a reason otherwise."""
    with open(path, "rb") as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return yaml.safe_load(raw.decode("utf-8"))  # JSON is YAML
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8: {e.reason} at byte {e.start}") from None
    except (yaml.YAMLError, RecursionError) as e:
        raise ValueError(str(YamlProblem.of(e))) from None


@dataclass(frozen=True)
class _Entry:
    """What one file gave at its current content."""

    fingerprint: bytes
    pod: StaticPod | None
    errors: list[ManifestError]


class StaticPodSource:
    """Scans a directory; each scan() reports what changed since the previous scan."""

    def __init__(self, directory: str | os.PathLike[str], node_name: str,
                 parse: Callable[[Mapping[str, Any]], Pod] = parse_pod) -> None:
        self.directory = Path(directory)
        self.node_name = node_name
        self._parse = parse
        self._by_file: dict[Path, _Entry] = {}
        self._pods: dict[tuple[str, str], StaticPod] = {}
        self._errors: list[ManifestError] = []

    @property
    def pods(self) -> dict[tuple[str, str], StaticPod]:
        return dict(self._pods)

    def _files(self) -> list[Path]:
        try:
            entries = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []  # no directory: no static pods (the kubelet logs and carries on)
        return [p for p in entries if not p.name.startswith(".")
                and p.suffix.lower() in SUFFIXES and p.is_file()]

    def _read(self, path: Path) -> tuple[StaticPod | None, list[ManifestError]]:
        """Parse one file: its pod, or None and the errors naming file and field."""
        try:
            doc = _load(path)
            if not isinstance(doc, dict):
                raise ValueError(f"expected a Pod object, got {type(doc).__name__}")
            manifest, config_hash = static_defaults(doc, self.node_name)
            return StaticPod(path, self._parse(manifest), manifest, config_hash), []
        except ValidationErrors as e:
            return None, [ManifestError(path, fe.path, fe.message) for fe in e.errors]
        except FieldError as e:
            return None, [ManifestError(path, e.path, e.message)]
        except (OSError, ValueError) as e:
            return None, [ManifestError(path, "", str(e))]

    def _entry(self, path: Path) -> _Entry:
        try:
            fingerprint = hashlib.sha256(path.read_bytes()).digest()
        except OSError as e:  # vanished or unreadable since listing
            fingerprint, pod, errors = b"", None, [ManifestError(path, "", str(e))]
        else:
            old = self._by_file.get(path)
            if old is not None and old.fingerprint == fingerprint:
                return old  # unchanged bytes: same pod, same errors, no re-parse
            pod, errors = self._read(path)
        old = self._by_file.get(path)
        if pod is None and old is not None:
            pod = old.pod  # a broken edit keeps the last good pod running
        return _Entry(fingerprint, pod, errors)

    def scan(self) -> StaticPodDiff:
        """Re-read the directory; `changed` pods have a new hash (and so a new uid if the
        manifest sets none): the caller replaces them."""
        by_file = {path: self._entry(path) for path in self._files()}
        errors = [e for entry in by_file.values() for e in entry.errors]
        pods: dict[tuple[str, str], StaticPod] = {}
        for path, entry in by_file.items():
            sp = entry.pod
            if sp is None:
                continue
            if sp.key in pods:
                errors.append(ManifestError(path, "metadata.name", (
                    f"pod {sp.key[0]}/{sp.key[1]} is already defined in {pods[sp.key].path}")))
                continue
            pods[sp.key] = sp
        diff = StaticPodDiff(
            added=[p for k, p in pods.items() if k not in self._pods],
            changed=[p for k, p in pods.items()
                     if k in self._pods and self._pods[k].hash != p.hash],
            removed=[p for k, p in self._pods.items() if k not in pods],
            errors=errors)
        for e in errors:
            if e not in self._errors:  # log each problem once, not on every scan
                log.warning("static_pod_invalid", path=str(e.path), field=e.field,
                            error=e.message)
        self._by_file, self._pods, self._errors = by_file, pods, errors
        return diff
