"""The files of configMap, secret, downwardAPI and projected volumes, as the kubelet's volume
plugins make them. Pure: the ConfigMaps and Secrets come in as values (VolumeSources, decoded from
the API's objects by `config_map_data` / `secret_data`: `data` and base64 `binaryData` of a
ConfigMap, base64 `data` of a Secret).

- configMap / secret without `items`: one file per key, named after the key; with `items`: only
  the listed keys, each at its `path`. A missing object or listed key is an error
  (VolumeSourceError: the container is not created) unless the source is `optional`, when the
  volume (or that projection) is simply empty.
- downwardAPI: metadata.name / namespace / uid, one label or annotation
  (metadata.labels['k']), or all of them as the kubelet formats a map (sorted `key="value"`
  lines); resourceFieldRef through the same arithmetic as the env var (core.downward).
- modes: the item's `mode`, else the volume's `defaultMode` (0644 unless set).
- projected: its sources in order; a later file of the same path replaces an earlier one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.downward import EnvResolutionError, NodeFacts, field_value, resource_value
from nodeagent.core.model import Pod
from nodeagent.core.model.env import ObjectFieldSelector, ResourceFieldSelector
from nodeagent.core.model.volume import KeyToPath, Projection, Volume
from nodeagent.core.quantity import parse_quantity


class VolumeSourceError(ValueError):
    """A volume's files cannot be made (a missing ConfigMap, Secret or key)."""


@dataclass(frozen=True)
class VolumeSources:
    """The ConfigMaps and Secrets of the pod's namespace the volumes name, by name (absent: not found)."""

    config_maps: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)


def _b64(kind: str, name: str, key: str, value: object) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise VolumeSourceError(f"{kind} {name}: key {key}: not valid base64") from None


def config_map_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's keys as file contents: `data` (UTF-8) and `binaryData` (base64)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    out = {str(k): str(v).encode() for k, v in (obj.get("data") or {}).items()}
    out.update({str(k): _b64("configmap", name, k, v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's keys as file contents (`data` is base64 on the wire)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    return {str(k): _b64("secret", name, k, v) for k, v in (obj.get("data") or {}).items()}


def needed_objects(volumes: tuple[Volume, ...]) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap ("configMap") and Secret ("secret") the volumes name."""
    return {(p.kind, p.name) for v in volumes for p in v.projections if p.kind in ("configMap", "secret")}


@dataclass(frozen=True)
class VolumeFile:
    path: str  # relative to the volume's root, without '..' (checked at admission)
    data: bytes
    mode: int


def format_map(m: dict[str, str]) -> str:
    """fieldpath.FormatMap: sorted `key="value"` lines (Go's %q quoting)."""
    return "\n".join(f"{k}={json.dumps(m[k], ensure_ascii=False)}" for k in sorted(m))


def _keyed(kind: str, name: str, data: dict[str, bytes] | None, items: tuple[KeyToPath, ...], optional: bool,
           default_mode: int, namespace: str) -> list[VolumeFile]:
    what = "configmap" if kind == "configMap" else "secret"
    if data is None:
        if optional:
            return []
        raise VolumeSourceError(f'{what} "{name}" not found in namespace {namespace}')
    if not items:
        return [VolumeFile(k, data[k], default_mode) for k in sorted(data)]
    out = []
    for item in items:
        if item.key not in data:
            if optional:
                continue
            raise VolumeSourceError(f"{what} {namespace}/{name} references non-existent key: {item.key}")
        out.append(VolumeFile(item.path, data[item.key], default_mode if item.mode is None else item.mode))
    return out


def _downward(p: Projection, pod: Pod, facts: NodeFacts, default_mode: int) -> list[VolumeFile]:
    out = []
    for f in p.files:
        mode = default_mode if f.mode is None else f.mode
        try:
            if f.field_path in ("metadata.labels", "metadata.annotations"):
                m = pod.metadata.labels if f.field_path == "metadata.labels" else pod.metadata.annotations
                text = format_map(dict(m))
            elif f.field_path is not None:
                text = field_value(ObjectFieldSelector(field_path=f.field_path), pod, facts)
            else:
                ref = ResourceFieldSelector(container_name=f.container_name, resource=f.resource or "",
                                            divisor=parse_quantity(f.divisor) if f.divisor else None)
                text = resource_value(ref, pod, pod.spec.containers[0], facts)
        except (EnvResolutionError, ValueError) as e:
            raise VolumeSourceError(f"downwardAPI {f.path}: {e}") from None
        out.append(VolumeFile(f.path, text.encode(), mode))
    return out


def projection_files(p: Projection, pod: Pod, sources: VolumeSources, facts: NodeFacts,
                     default_mode: int) -> list[VolumeFile]:
    ns = pod.metadata.namespace
    if p.kind == "downwardAPI":
        return _downward(p, pod, facts, default_mode)
    found = (sources.config_maps if p.kind == "configMap" else sources.secrets).get(p.name)
    return _keyed(p.kind, p.name, dict(found) if found is not None else None, p.items, p.optional,
                  default_mode, ns)


def volume_files(v: Volume, pod: Pod, sources: VolumeSources, facts: NodeFacts) -> tuple[VolumeFile, ...]:
    """The files of one configMap, secret, downwardAPI or projected volume (later paths win)."""
    by_path: dict[str, VolumeFile] = {}
    for p in v.projections:
        for f in projection_files(p, pod, sources, facts, v.default_mode):
            by_path[f.path] = f
    return tuple(by_path.values())
