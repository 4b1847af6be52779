"""The pod's volumes made real on the host, and torn down with the pod (blocking: call off the loop).

`PodVolumeHost.ensure()` (idempotent, once per container start, serialised by a lock since the
pod's containers prepare concurrently) makes each volume of volume_plan.PodVolumes:
- emptyDir: a 0777 directory (as the kubelet makes it), with a tmpfs on it for `medium: Memory`
  (rootfs.mount_tmpfs: nosuid, nodev, sized; its pages are charged to the writer's cgroup);
- hostPath: the kubelet's type checks (`hostPath type check failed: P is not a directory`...),
  DirectoryOrCreate making the directory (0755) and FileOrCreate the file (0644; its parent must
  exist, as upstream);
- configMap, secret, downwardAPI, projected: their files (volume_files.py) written by the atomic
  writer (volume_writer.py: a `..data` link switched to a new generation) with their modes, when
  the volume is first made; `refresh(sources, pod)` writes them again from newer objects (the
  pod's refresh loop, volume_refresh.py), a changed set replacing the old one at once.

`mounts(container)` turns the container's MountPlans into config.json binds. A subPath is resolved
on the host: it must stay inside the volume after every symlink is followed (a container that
planted `sub -> /etc` in an emptyDir does not get the host's /etc: SubPathError, the kubelet's
CreateContainerConfigError), and a missing subPath directory is created inside the volume, as
the kubelet does.

`teardown()` unmounts the tmpfs volumes; the directories go with the pod's directory.

`fetch_sources` (on the loop, before `ensure`) gets the ConfigMaps and Secrets the volumes name
through an ObjectGetter: the agent's cluster client when it is joined to a server
(cluster_client/objects.py); without one every object reads as not found.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from nodeagent.agent.pods import volume_writer
from nodeagent.agent.pods.volume_files import (
    VolumeSourceError,
    VolumeSources,
    config_map_data,
    needed_objects,
    secret_data,
    volume_files,
)
from nodeagent.agent.pods.volume_plan import API_DATA, MountPlan, PodVolumes, VolumePlan, container_mounts
from nodeagent.agent.runtime.oci import rootfs
from nodeagent.agent.runtime.oci.bundle import Mount, bind
from nodeagent.core.downward import NodeFacts
from nodeagent.core.errors import FieldError
from nodeagent.core.model import Pod
from nodeagent.core.model.pod import Container

log = structlog.get_logger(__name__)

# (resource "configmaps"/"secrets", namespace, name) -> the object, None when not found; OSError when
# it cannot be read now (the container waits, CreateContainerError, and is tried again)
ObjectGetter = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]
_RESOURCES = {"configMap": "configmaps", "secret": "secrets"}

EMPTY_DIR_MODE = 0o777
_TYPE_CHECKS: dict[str, tuple[Callable[[int], bool], str]] = {
    "Directory": (stat.S_ISDIR, "a directory"),
    "DirectoryOrCreate": (stat.S_ISDIR, "a directory"),
    "File": (stat.S_ISREG, "a file"),
    "FileOrCreate": (stat.S_ISREG, "a file"),
    "Socket": (stat.S_ISSOCK, "a socket file"),
    "CharDevice": (stat.S_ISCHR, "a character device"),
    "BlockDevice": (stat.S_ISBLK, "a block device"),
}


class VolumeSetupError(OSError):
    """A volume cannot be made (the kubelet's FailedMount): the container is not created."""


class SubPathError(FieldError):
    """A subPath that leaves its volume (through a symlink): the container is not created."""


def check_host_path(path: str, kind: str) -> None:
    """The kubelet's hostPath type checker, creating what the *OrCreate types create."""
    if kind == "":
        return
    if kind == "DirectoryOrCreate" and not os.path.lexists(path):
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif kind == "FileOrCreate" and not os.path.lexists(path):
        if not os.path.isdir(os.path.dirname(path) or "/"):
            raise VolumeSetupError(f"hostPath type check failed: {path}: its parent directory does not exist")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        os.close(fd)
    check, what = _TYPE_CHECKS[kind]
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise VolumeSetupError(f"hostPath type check failed: {path} does not exist") from None
    if not check(mode):
        raise VolumeSetupError(f"hostPath type check failed: {path} is not {what}")


def within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_sub_path(volume_root: str, sub_path: str) -> str:
    """The host path of `sub_path` inside the volume, every symlink followed; created as a
    directory when missing (inside the volume only). SubPathError when it leaves the volume."""
    root = os.path.realpath(volume_root)
    if not sub_path:
        return root
    if sub_path.startswith("/") or ".." in sub_path.split("/"):
        raise SubPathError("volumeMounts.subPath", f"{sub_path!r} must be a relative path without '..'")
    full = os.path.realpath(os.path.join(root, sub_path))
    if not within(root, full):
        raise SubPathError("volumeMounts.subPath", f"subpath {sub_path!r} is outside the volume {volume_root!r}")
    if not os.path.lexists(full):
        os.makedirs(full, mode=0o755, exist_ok=True)
        # made through no symlink: check again (a link planted meanwhile is refused)
        again = os.path.realpath(os.path.join(root, sub_path))
        if again != full:
            raise SubPathError("volumeMounts.subPath", f"subpath {sub_path!r} changed while it was made")
    return full


async def fetch_sources(volumes: PodVolumes, namespace: str, get: ObjectGetter | None) -> VolumeSources:
    """The ConfigMaps and Secrets `volumes` name, read concurrently (none without a getter)."""
    wanted = sorted(needed_objects(tuple(v.volume for v in volumes.volumes.values())))
    if not wanted or get is None:
        return VolumeSources()
    found = await asyncio.gather(*(get(_RESOURCES[kind], namespace, name) for kind, name in wanted))
    config_maps: dict[str, dict[str, bytes]] = {}
    secrets: dict[str, dict[str, bytes]] = {}
    for (kind, name), obj in zip(wanted, found, strict=True):
        if obj is None:
            continue
        if kind == "configMap":
            config_maps[name] = config_map_data(obj)
        else:
            secrets[name] = secret_data(obj)
    return VolumeSources(config_maps, secrets)


class PodVolumeHost:
    """One pod's volumes on the host (see the module)."""

    def __init__(self, pod: Pod, volumes: PodVolumes, facts: Callable[[], NodeFacts] = NodeFacts) -> None:
        self.pod = pod
        self.volumes = volumes
        self._facts = facts
        self._lock = threading.Lock()
        self._made: set[str] = set()
        self._log = log.bind(pod=pod.key)

    @property
    def needs_objects(self) -> bool:
        """Some volume is made from ConfigMaps or Secrets not written yet (fetch_sources first)."""
        return any(p.kind in _RESOURCES for v in self.volumes.volumes.values() if v.name not in self._made
                   for p in v.volume.projections)

    def ensure(self, sources: VolumeSources | None = None) -> None:
        """Every volume made (VolumeSetupError / OSError / VolumeSourceError naming the volume)."""
        with self._lock:
            for v in self.volumes.volumes.values():
                try:
                    self._make(v, sources or VolumeSources())
                except (OSError, ValueError) as e:
                    message = f'MountVolume.SetUp failed for volume "{v.name}": {e}'
                    if isinstance(e, OSError):
                        raise VolumeSetupError(message) from None
                    raise VolumeSourceError(message) from None

    def _make(self, v: VolumePlan, sources: VolumeSources) -> None:
        if not v.path:
            raise VolumeSetupError(f"this node does not provide {v.kind} volumes")
        if v.kind == "hostPath":
            check_host_path(v.path, v.volume.host_path_type)  # every start: the host may have changed
            return
        if v.name in self._made and (not v.memory or rootfs.is_mountpoint(v.path)):
            return
        if v.kind == "emptyDir":
            os.makedirs(v.path, mode=EMPTY_DIR_MODE, exist_ok=True)
            os.chmod(v.path, EMPTY_DIR_MODE)
            if v.memory:
                rootfs.mount_tmpfs(v.path, self.volumes.size_of(v))
        elif v.kind in API_DATA:
            volume_writer.write(v.path, volume_files(v.volume, self.pod, sources, self._facts()))
        self._made.add(v.name)
        self._log.info("volume_ready", volume=v.name, kind=v.kind, path=v.path, memory=v.memory)

    @property
    def refreshable(self) -> bool:
        """Some volume's files come from the API (ConfigMaps, Secrets, the pod's own fields)."""
        return any(v.kind in API_DATA for v in self.volumes.volumes.values())

    @property
    def reads_pod_metadata(self) -> bool:
        """Some downwardAPI file shows the pod's labels or annotations (which can change)."""
        return any((f.field_path or "").startswith(("metadata.labels", "metadata.annotations"))
                   for v in self.volumes.volumes.values() for p in v.volume.projections for f in p.files)

    def refresh(self, sources: VolumeSources, pod: Pod | None = None) -> list[str]:
        """The files of every volume made so far written again from `sources` (and `pod`'s
        metadata); the names of those that changed. A volume whose files cannot be made now (its
        object gone, a key missing) keeps the files it has, as the kubelet's do."""
        changed: list[str] = []
        with self._lock:
            if pod is not None:
                self.pod = pod
            for v in self.volumes.volumes.values():
                if v.kind not in API_DATA or v.name not in self._made:
                    continue
                try:
                    if volume_writer.write(v.path, volume_files(v.volume, self.pod, sources, self._facts())):
                        changed.append(v.name)
                except (OSError, ValueError) as e:
                    self._log.warning("volume_refresh_failed", volume=v.name, error=str(e))
        if changed:
            self._log.info("volumes_refreshed", volumes=changed)
        return changed

    def mounts(self, c: Container) -> tuple[Mount, ...]:
        """config.json binds of the container's volumeMounts (ensure() first)."""
        return tuple(self._bind(m) for m in container_mounts(self.volumes, c))

    def _bind(self, m: MountPlan) -> Mount:
        try:
            source = resolve_sub_path(m.source, m.sub_path)
        except SubPathError as e:
            raise SubPathError(f"volumeMounts[{m.volume}].subPath", e.message) from None
        return bind(source, m.destination, read_only=m.read_only)

    def teardown(self) -> None:
        """The tmpfs volumes unmounted (the directories go with the pod's directory)."""
        n = rootfs.unmount_all(self.volumes.root)
        if n:
            self._log.info("volumes_unmounted", count=n)
