"""Content digests: hashing a stream as it is read, and checking a stored blob.

skopeo checks every blob it downloads against its descriptor before it names the file after the
digest. The store still checks again whatever it reads (manifest, config, every layer as it is
unpacked): a file in the blob directory may be damaged since (a crash, a full disk, a person),
and an imported layout or archive was never checked by anyone.
"""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

from nodeagent.agent.images.errors import DigestMismatch
from nodeagent.agent.images.reference import validate_digest

CHUNK = 1 << 20


class HashingReader:
    """A read()-only file over `raw` that hashes and counts every byte read through it."""

    def __init__(self, raw: BinaryIO, algorithm: str = "sha256") -> None:
        self.raw = raw
        self.algorithm = algorithm
        self._hash = hashlib.new(algorithm)
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self._hash.update(data)
        self.count += len(data)
        return data

    def drain(self) -> None:
        """Read (and hash) whatever is left."""
        while self.read(CHUNK):
            pass

    @property
    def digest(self) -> str:
        return f"{self.algorithm}:{self._hash.hexdigest()}"


def algorithm_of(digest: str) -> str:
    return validate_digest(digest).partition(":")[0]


def check(what: str, digest: str, got_digest: str, size: int | None = None, got_size: int | None = None) -> None:
    """DigestMismatch naming `what` unless the content matched its descriptor."""
    if size is not None and got_size is not None and size != got_size:
        raise DigestMismatch(f"{what}: size mismatch: the descriptor says {size} bytes, the content has {got_size}")
    if digest != got_digest:
        raise DigestMismatch(f"{what}: digest mismatch: expected {digest}, the content hashes to {got_digest}")


def read_verified(path: str, digest: str, size: int | None = None, limit: int = 4 << 20) -> bytes:
    """A small blob (manifest, config, index) read whole and checked; `limit` guards memory."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise DigestMismatch(f"blob {digest}: larger than {limit} bytes, not a manifest or config")
    got = f"{algorithm_of(digest)}:{hashlib.new(algorithm_of(digest), data).hexdigest()}"
    check(f"blob {digest}", digest, got, size, len(data))
    return data


def file_digest(path: str, algorithm: str = "sha256") -> tuple[str, int]:
    """(digest, size) of a file, read in chunks."""
    with open(path, "rb") as f:
        reader = HashingReader(f, algorithm)
        reader.drain()
    return reader.digest, reader.count


def blob_path(blobs_dir: str, digest: str) -> str:
    """`<blobs_dir>/<algorithm>/<hex>` (the OCI layout's blobs/ shape, skopeo's shared blob dir)."""
    algorithm, _, hexpart = validate_digest(digest).partition(":")
    return os.path.join(blobs_dir, algorithm, hexpart)


__all__ = ["HashingReader", "algorithm_of", "blob_path", "check", "file_digest", "read_verified"]
