"""The latest committed version of every live key, sorted by key.

A SortedDict (sortedcontainers) gives O(log n) put/delete, prefix ranges from a start key, and the
count of a range from two bisections, so a LIST's `count` (remainingItemCount) costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from sortedcontainers import SortedDict

from nodeagent.cluster.storage.interface import KeyValue


def prefix_end(prefix: str) -> str | None:
    """The first string after every string that starts with `prefix` (None: no bound)."""
    for i in range(len(prefix) - 1, -1, -1):
        if ord(prefix[i]) < 0x10FFFF:
            return prefix[:i] + chr(ord(prefix[i]) + 1)
    return None


def bounds(prefix: str, start_key: str) -> tuple[str, str | None]:
    """[lo, hi) of a range: the keys with `prefix`, from `start_key` on."""
    return max(prefix, start_key), prefix_end(prefix)


class Keyspace:
    def __init__(self) -> None:
        self._kvs: SortedDict[str, KeyValue] = SortedDict()

    def __len__(self) -> int:
        return len(self._kvs)

    def get(self, key: str) -> KeyValue | None:
        return self._kvs.get(key)

    def put(self, kv: KeyValue) -> None:
        self._kvs[kv.key] = kv

    def delete(self, key: str) -> None:
        self._kvs.pop(key, None)

    def count(self, lo: str, hi: str | None) -> int:
        end = len(self._kvs) if hi is None else self._kvs.bisect_left(hi)
        return max(0, end - self._kvs.bisect_left(lo))

    def iter(self, lo: str, hi: str | None) -> Iterator[KeyValue]:
        """The live kvs in [lo, hi), in key order."""
        keys = self._kvs.irange(lo, hi, inclusive=(True, False)) if hi is not None else self._kvs.irange(lo)
        kvs = self._kvs
        return (kvs[k] for k in keys)

    def first(self, lo: str, hi: str | None, limit: int) -> list[KeyValue]:
        """At most `limit` kvs of [lo, hi) (0: all)."""
        it = self.iter(lo, hi)
        return list(islice(it, limit)) if limit else list(it)
