"""The pod's volumes on this node and each container's mounts: pod spec -> plain plans. Pure.

Where each volume lives (as the kubelet lays it out, under the pod's directory on nodefs):
  <pod dir>/_volumes/kubernetes.io~empty-dir/<name>   emptyDir (a tmpfs mounted there for
                                                      `medium: Memory`, sized by sizeLimit, else by
                                                      the pod's memory limit, else tmpfs' default)
  <pod dir>/_volumes/kubernetes.io~configmap/<name>   configMap, secret, downwardAPI, projected:
  ...~secret/<name>, ~downward-api/<name>, ~projected/<name>   files written by the agent
  the host's own path                                 hostPath
'_' and '~' cannot be in a container name (a DNS label), so these never meet a container's log
directory beside them. Everything under the pod directory goes with the pod (manager._remove).

`node_volume_errors` is what this node refuses at admission (422 naming the field), on top of the
API's own checks (core/model/volume.py): a volume type it does not provide (persistentVolumeClaim,
nfs...), an emptyDir medium other than "" or Memory, projected serviceAccountToken sources,
subPathExpr, mount propagation, a relative mountPath, and any volumeMount of a container that
runs as a host process: it has no mount namespace to mount into (docs/volumes.md).

`container_mounts`: one MountPlan per volumeMount, read-only when the mount says so and always for
configMap, secret, downwardAPI and projected volumes (the kubelet's ReadOnlyAPIDataVolumes), in
the order containerd's CRI plugin mounts them (fewer path elements first, so a mount inside
another's mount point is made after it).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.core.errors import FieldError
from nodeagent.core.model import Pod
from nodeagent.core.model.pod import Container
from nodeagent.core.model.volume import Volume, parse_mount, parse_volume
from nodeagent.core.names import invalid, quote

VOLUMES_DIR = "_volumes"
PLUGIN_DIRS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
SUPPORTED = (*PLUGIN_DIRS, "hostPath")
MEDIUMS = ("", "Memory")
API_DATA = ("configMap", "secret", "downwardAPI", "projected")  # files the agent writes: mounted read-only
MEDIUM_MEMORY = "Memory"


@dataclass(frozen=True)
class VolumePlan:
    volume: Volume
    path: str  # the volume's root on the host

    @property
    def name(self) -> str:
        return self.volume.name

    @property
    def kind(self) -> str:
        return self.volume.kind

    @property
    def memory(self) -> bool:
        """An emptyDir on tmpfs."""
        return self.kind == "emptyDir" and self.volume.medium == MEDIUM_MEMORY


@dataclass(frozen=True)
class PodVolumes:
    """What the pod's volumes are on this node (empty for a pod without volumes)."""

    root: str  # <pod dir>/_volumes
    volumes: Mapping[str, VolumePlan]
    tmpfs_size: int | None = None  # bytes, for memory-backed emptyDirs without a sizeLimit

    def size_of(self, v: VolumePlan) -> int | None:
        """The tmpfs size of a memory-backed emptyDir: sizeLimit (a zero one is unset), else the pod's."""
        limit = v.volume.size_limit
        if limit is not None and not limit.is_zero():
            return max(1, limit.value())
        return self.tmpfs_size

    @property
    def local_dirs(self) -> tuple[str, ...]:
        """Disk-backed emptyDirs: what counts in the pod's ephemeral-storage usage."""
        return tuple(v.path for v in self.volumes.values() if v.kind == "emptyDir" and not v.memory)


@dataclass(frozen=True)
class MountPlan:
    volume: str
    source: str  # the volume's root on the host
    sub_path: str  # "" or relative without '..' (checked at admission)
    destination: str  # absolute in the container
    read_only: bool


def volumes_root(pod_dir: str) -> str:
    return os.path.join(pod_dir, VOLUMES_DIR)


def plan_volumes(pod: Pod, pod_dir: str, memory_limit: int | None = None) -> PodVolumes:
    """The pod's volumes (validated, and accepted by node_volume_errors); `memory_limit`: the pod
    cgroup's, which bounds a memory-backed emptyDir without its own sizeLimit."""
    root = volumes_root(pod_dir)
    out: dict[str, VolumePlan] = {}
    for raw in pod.spec.volumes:
        v = parse_volume(raw)
        if v.kind == "hostPath":
            path = v.host_path
        elif v.kind in PLUGIN_DIRS:
            path = os.path.join(root, PLUGIN_DIRS[v.kind], v.name)
        else:
            path = ""  # refused at admission (node_volume_errors); a restored pod's fails at setup
        out[v.name] = VolumePlan(v, path)
    return PodVolumes(root, out, memory_limit)


def container_mounts(volumes: PodVolumes, c: Container) -> tuple[MountPlan, ...]:
    """The container's mounts, in the order the runtime must make them."""
    mounts = []
    for raw in c.volume_mounts:
        m = parse_mount(raw)
        v = volumes.volumes[m.name]
        mounts.append(MountPlan(m.name, v.path, m.sub_path, posixpath.normpath(m.mount_path),
                                m.read_only or v.kind in API_DATA))
    return tuple(sorted(mounts, key=lambda p: len([e for e in p.destination.split("/") if e])))


def node_volume_errors(pod: Pod, runs_image: Callable[[Container], bool]) -> list[FieldError]:
    """What this node cannot honour of the pod's (API-valid) volumes and mounts."""
    errs: list[FieldError] = []
    for i, raw in enumerate(pod.spec.volumes):
        v = parse_volume(raw)
        path = f"spec.volumes[{i}].{v.kind}"
        if v.kind not in SUPPORTED:
            errs.append(FieldError(path, f"Forbidden: this node provides only {', '.join(SUPPORTED)} volumes"))
        elif v.kind == "emptyDir" and v.medium not in MEDIUMS:
            errs.append(FieldError(f"{path}.medium", f"Unsupported value: {quote(v.medium)}: supported values: "
                                                       f"{', '.join(quote(m) for m in MEDIUMS)}"))
        elif v.kind == "projected":
            for j, src in enumerate(raw["projected"].get("sources") or ()):
                for kind in ("serviceAccountToken", "clusterTrustBundle"):
                    if src.get(kind) is not None:
                        errs.append(FieldError(f"{path}.sources[{j}].{kind}", "Forbidden: not provided by this node"))
    for kind, containers in (("initContainers", pod.spec.init_containers), ("containers", pod.spec.containers)):
        for i, c in enumerate(containers):
            if not c.volume_mounts:
                continue
            path = f"spec.{kind}[{i}].volumeMounts"
            if not runs_image(c):
                errs.append(FieldError(path, "Forbidden: a host-process container has no mount namespace to mount "
                                             "volumes into (run it from an image to use volumes)"))
                continue
            for j, raw in enumerate(c.volume_mounts):
                m = parse_mount(raw)
                where = f"{path}[{j}]"
                if not m.mount_path.startswith("/"):
                    errs.append(FieldError(f"{where}.mountPath", invalid(m.mount_path, "must be an absolute path")))
                elif ".." in m.mount_path.split("/"):
                    errs.append(FieldError(f"{where}.mountPath", invalid(m.mount_path, "must not contain '..'")))
                if m.sub_path_expr:
                    errs.append(FieldError(f"{where}.subPathExpr", "Forbidden: not supported by this node"))
                if m.mount_propagation not in (None, "None"):
                    errs.append(FieldError(f"{where}.mountPropagation", "Forbidden: not supported by this node"))
                if raw.get("recursiveReadOnly") not in (None, "Disabled"):
                    errs.append(FieldError(f"{where}.recursiveReadOnly", "Forbidden: not supported by this node"))
    return errs
