"""Local-storage limits of one pod, as the kubelet's localStorageEviction checks them every pass
(pkg/kubelet/eviction/eviction_manager.go, emptyDirLimitEviction). Pure.

A disk-backed emptyDir with a positive `sizeLimit` whose usage exceeds it gets its pod evicted at
once (grace 0), whatever the node's thresholds, with the kubelet's message naming the volume.
A memory-backed emptyDir needs no check here: its tmpfs is sized by the limit and refuses writes
past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.core.quantity import Quantity

EMPTY_DIR_MESSAGE = 'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '


@dataclass(frozen=True)
class EmptyDirUsage:
    volume: str
    size_limit: Quantity | None
    used: int  # bytes on disk (du)


def empty_dir_violation(volumes: Sequence[EmptyDirUsage]) -> str | None:
    """The eviction message for the first emptyDir over its sizeLimit, or None."""
    for v in volumes:
        limit = v.size_limit
        if limit is not None and limit.value() > 0 and v.used > limit.value():
            return EMPTY_DIR_MESSAGE.format(volume=v.volume, limit=str(limit))
    return None
