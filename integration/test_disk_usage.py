"""node/disk_usage.dir_usage on real mounts (root): a pod's directory holds its image containers'
mounted rootfs (overlay) and its memory-backed emptyDirs (tmpfs). The walk counts what lies on the
directory's own filesystem (the overlay's upper dir, the logs, a disk emptyDir) and never the
image's layers seen through the merged rootfs, nor tmpfs pages (they are memory): the disk
pressure ranking (eviction/signals.pod_usage) walks the whole pod directory.

Host: `.venv/bin/pytest integration/test_disk_usage.py -q`; UML guest: `integration/run-in-uml.sh ...`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.agent.node.disk_usage import dir_usage
from nodeagent.agent.runtime.oci import rootfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts an overlay and a tmpfs)")
MI = 1 << 20


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(os.urandom(size))  # not sparse, not compressible: blocks are really allocated
        f.flush()
        os.fsync(f.fileno())


def test_the_walk_stays_on_the_pod_directorys_filesystem(tmp_path: Path) -> None:
    image = tmp_path / "image"  # an unpacked layer, outside the pod's directory
    write(image / "bin" / "big", 8 * MI)
    pod = tmp_path / "pod"
    bundle = pod / "oci" / "main"
    write(pod / "main" / "0.log", 64 << 10)
    write(pod / "_volumes" / "kubernetes.io~empty-dir" / "disk" / "f", 256 << 10)
    merged, memory = bundle / "rootfs", pod / "_volumes" / "kubernetes.io~empty-dir" / "mem"
    try:
        rootfs.mount_overlay([str(image)], str(bundle / "upper"), str(bundle / "work"), str(merged))
        write(merged / "tmp" / "written", 512 << 10)  # the container writes: the copy lands in upper
        rootfs.mount_tmpfs(str(memory), 8 * MI)
        write(memory / "f", 4 * MI)
        used, inodes = dir_usage(str(pod))
        assert (merged / "bin" / "big").exists() and (bundle / "upper" / "tmp" / "written").exists()
        data = (64 + 256 + 512) << 10
        assert data <= used < data + (256 << 10), used  # plus the directories' own blocks, not 8 + 4 MiB more
        # main/ 0.log _volumes/ kubernetes.io~empty-dir/ disk/ f oci/ main/ upper/ tmp/ written work/ work/work/;
        # not the two mount points, nor what is under them
        assert inodes == 13, inodes
        assert dir_usage(str(merged))[0] >= 8 * MI  # from inside the overlay, the overlay is the filesystem
    finally:
        rootfs.unmount(str(memory))
        rootfs.unmount(str(merged))
