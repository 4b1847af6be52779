"""Mounts the agent makes on the host for image containers: the overlay rootfs (image layers
read-only below, a writable layer on nodefs above) and tmpfs for emptyDir `medium: Memory`.

mount(2)/umount2(2) through libc (ctypes), no mount(8) process per container. Everything else
(binds of volumes, /etc/hosts...) the OCI runtime mounts inside the container's own mount
namespace, so only these need unmounting on the host.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Sequence

MNT_DETACH = 2
MS_NOSUID = 0x2
MS_NODEV = 0x4
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def overlay_options(lowerdirs: Sequence[str], upper: str, work: str) -> str:
    """overlayfs options; lowerdirs top layer first. ValueError on a path overlayfs cannot take."""
    for p in (*lowerdirs, upper, work):
        if not os.path.isabs(p) or any(c in p for c in ",:\0"):
            raise ValueError(f"{p!r} cannot be an overlay directory (absolute, no ',' ':' or NUL)")
    if not lowerdirs:
        raise ValueError("an overlay needs at least one image layer")
    return f"lowerdir={':'.join(lowerdirs)},upperdir={upper},workdir={work}"


def is_mountpoint(path: str) -> bool:
    return os.path.ismount(path)


def mount_overlay(lowerdirs: Sequence[str], upper: str, work: str, target: str) -> None:
    """A fresh writable layer over the image: upper and work are emptied first (a container's
    restart starts from its image, as Kubernetes does)."""
    unmount(target)
    for d in (upper, work):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, mode=0o755)
    os.makedirs(target, mode=0o755, exist_ok=True)
    opts = overlay_options(lowerdirs, upper, work)
    _check(_libc.mount(b"overlay", target.encode(), b"overlay", 0, opts.encode()), f"mount overlay on {target}")


def mount_tmpfs(target: str, size_bytes: int | None) -> None:
    """tmpfs for an emptyDir of medium Memory; its pages are charged to the cgroup of whoever
    writes them (the pod's containers)."""
    if is_mountpoint(target):
        return
    os.makedirs(target, mode=0o777, exist_ok=True)
    opts = "mode=0777" + (f",size={size_bytes}" if size_bytes else "")
    _check(_libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode()),
           f"mount tmpfs on {target}")


def unmount(target: str) -> bool:
    """Detach whatever is mounted at target (repeatedly: mounts may be stacked); True if any was."""
    done = False
    while is_mountpoint(target):
        _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")
        done = True
    return done


def mounts_under(prefix: str, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points at or below `prefix`, deepest first (what to unmount before removing it)."""
    prefix = prefix.rstrip("/")
    out = []
    try:
        with open(mountinfo) as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4:
                    point = fields[4].replace("\\040", " ")
                    if point == prefix or point.startswith(prefix + "/"):
                        out.append(point)
    except OSError:
        return []
    return sorted(set(out), key=len, reverse=True)


def unmount_all(prefix: str) -> int:
    """Unmount everything under prefix (the pod's directory before it is removed)."""
    n = 0
    for point in mounts_under(prefix):
        try:
            if unmount(point):
                n += 1
        except OSError:
            pass
    return n
