"""How much a directory tree holds on disk, as `du` counts it (allocated blocks and inodes).

Used for what pods leave on the node's filesystem: logs, writable layers, local volumes.
"""

from __future__ import annotations

import os


def dir_usage(path: str) -> tuple[int, int]:
    """(bytes, inodes) used under a directory (du-like; skips what vanishes meanwhile)."""
    total = inodes = 0
    for root, dirs, files in os.walk(path, onerror=lambda e: None):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_blocks * 512
            inodes += 1
    return total, inodes


__all__ = ["dir_usage"]
