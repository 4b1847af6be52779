"""How much a directory tree holds on disk, as `du -x` counts it (allocated blocks and inodes).

Used for what pods leave on the node's filesystem: logs, writable layers, local volumes. The walk
stays on the tree's own filesystem: a pod's directory holds its image containers' mounted rootfs
(an overlay whose lower layers are the image, read-only and shared, and whose upper dir is
counted where it lies) and its memory-backed emptyDirs (tmpfs: memory, not disk); descending
into those would count the image's layers, the writable layer twice, and memory as disk.
"""

from __future__ import annotations

import os


def dir_usage(path: str) -> tuple[int, int]:
    """(bytes, inodes) used under a directory, on its filesystem only (du -x; skips what vanishes meanwhile)."""
    try:
        device = os.stat(path).st_dev
    except OSError:
        return 0, 0
    total = inodes = 0
    pending = [path]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != device:  # a mount point: another filesystem's root
                continue
            total += st.st_blocks * 512
            inodes += 1
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return total, inodes


__all__ = ["dir_usage"]
