"""Pod template hashes (controller.ComputeHash) and template equality (EqualIgnoreHash).

ComputeHash is FNV-32a over a deterministic dump of the template, then, when the owner has a
collisionCount, the count as a little-endian uint32 in an 8-byte buffer (upstream writes all 8),
then rand.SafeEncodeString of the decimal sum. Upstream dumps the Go struct with spew (field
order of the Go types, pointers followed); we dump the stored JSON with sorted keys and no
whitespace after dropping empty values. The hashes therefore differ from a real cluster's, which
is fine: a hash only names a new ReplicaSet/ControllerRevision and labels its pods, and it must be
stable across our own restarts (the dump depends only on the stored template). Which ReplicaSet is
a Deployment's current one is decided by EqualIgnoreHash, never by the hash.

EqualIgnoreHash is apiequality.Semantic.DeepEqual ignoring the `pod-template-hash` label; the
semantic equality treats nil and empty maps/lists as equal, which `normalized` reproduces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_FNV32_OFFSET, _FNV32_PRIME = 0x811C9DC5, 0x01000193
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand (also generateName's): no vowels, no 0/1/3
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"


def fnv32a(data: bytes, h: int = _FNV32_OFFSET) -> int:
    for b in data:
        h = ((h ^ b) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    """rand.SafeEncodeString: each byte mapped into the vowel-free alphabet (no bad words)."""
    return "".join(NAME_ALPHABET[b % len(NAME_ALPHABET)] for b in s.encode())


def normalized(value: Any) -> Any:
    """Drop None, {} and [] recursively (Semantic.DeepEqual treats unset and empty alike)."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            n = normalized(v)
            if n is None or n == {} or n == []:
                continue
            out[k] = n
        return out
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def dump(template: Mapping[str, Any]) -> bytes:
    return json.dumps(normalized(template), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def compute_hash(template: Mapping[str, Any], collision_count: int | None) -> str:
    h = fnv32a(dump(template))
    if collision_count is not None:
        h = fnv32a((collision_count & 0xFFFFFFFF).to_bytes(4, "little") + b"\0\0\0\0", h)
    return safe_encode(str(h))


def without_hash_label(template: Mapping[str, Any], label: str = POD_TEMPLATE_HASH_LABEL) -> dict[str, Any]:
    t = dict(template)
    meta = dict(t.get("metadata") or {})
    lbls = dict(meta.get("labels") or {})
    lbls.pop(label, None)
    meta["labels"] = lbls
    t["metadata"] = meta
    return t


def equal_ignore_hash(t1: Mapping[str, Any], t2: Mapping[str, Any]) -> bool:
    return bool(normalized(without_hash_label(t1)) == normalized(without_hash_label(t2)))
