"""Test images built in Python: tar layers entry by entry (hostile ones included), and OCI image
layouts holding them, so the unpacker, the store and the manager are tested without a registry.
The integration tests build theirs with umoci and skopeo instead (integration/images/)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


@dataclass
class Entry:
    name: str
    type: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    linkname: str = ""
    devmajor: int = 0
    devminor: int = 0
    size: int | None = None  # a header size different from the data (for lying headers)
    pax: dict[str, str] = field(default_factory=dict)


def f(name: str, data: bytes = b"", mode: int = 0o644, **kw: Any) -> Entry:
    return Entry(name, tarfile.REGTYPE, data, mode, **kw)


def d(name: str, mode: int = 0o755, **kw: Any) -> Entry:
    return Entry(name, tarfile.DIRTYPE, mode=mode, **kw)


def sym(name: str, target: str) -> Entry:
    return Entry(name, tarfile.SYMTYPE, mode=0o777, linkname=target)


def hard(name: str, target: str) -> Entry:
    return Entry(name, tarfile.LNKTYPE, linkname=target)


def chr_dev(name: str, major: int = 1, minor: int = 3) -> Entry:
    return Entry(name, tarfile.CHRTYPE, mode=0o666, devmajor=major, devminor=minor)


def blk_dev(name: str) -> Entry:
    return Entry(name, tarfile.BLKTYPE, mode=0o660, devmajor=8, devminor=0)


def fifo(name: str) -> Entry:
    return Entry(name, tarfile.FIFOTYPE, mode=0o644)


def tar_bytes(entries: Sequence[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = e.type
            info.mode = e.mode
            info.uid, info.gid = e.uid, e.gid
            info.linkname = e.linkname
            info.devmajor, info.devminor = e.devmajor, e.devminor
            info.mtime = 1_700_000_000
            info.pax_headers = dict(e.pax)
            if e.type == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def compress(tar: bytes, media_type: str) -> bytes:
    if media_type == LAYER_GZIP:
        return gzip.compress(tar, mtime=0)
    if media_type == LAYER_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(tar)
    return tar


@dataclass
class BuiltImage:
    manifest_digest: str
    config_digest: str
    diff_ids: list[str]
    layer_digests: list[str]
    blob_bytes: int


def write_blob(blobs: str, data: bytes) -> str:
    digest = sha(data)
    os.makedirs(os.path.join(blobs, "sha256"), exist_ok=True)
    with open(os.path.join(blobs, "sha256", digest.split(":")[1]), "wb") as out:
        out.write(data)
    return digest


def write_layout(layout: str, layers: Sequence[bytes], *, media_type: str = LAYER_GZIP,
                 config: dict[str, Any] | None = None, ref_name: str | None = "latest",
                 blobs: str | None = None, diff_ids: Sequence[str] | None = None,
                 architecture: str = "amd64") -> BuiltImage:
    """An OCI image layout with one image of `layers` (uncompressed tars); blobs in `blobs`
    (default: the layout's own blobs/). Returns the digests."""
    blobs = blobs or os.path.join(layout, "blobs")
    os.makedirs(layout, exist_ok=True)
    layer_descs = []
    total = 0
    for tar in layers:
        data = compress(tar, media_type)
        layer_descs.append({"mediaType": media_type, "digest": write_blob(blobs, data), "size": len(data)})
        total += len(data)
    ids = list(diff_ids) if diff_ids is not None else [sha(t) for t in layers]
    cfg = {"architecture": architecture, "os": "linux", "rootfs": {"type": "layers", "diff_ids": ids},
           "config": config if config is not None else {"Entrypoint": ["/bin/sh"], "Cmd": ["-c", "true"],
                                                        "Env": ["PATH=/bin"], "WorkingDir": "/", "User": "0:0"}}
    cfg_data = json.dumps(cfg).encode()
    cfg_digest = write_blob(blobs, cfg_data)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(cfg_data)},
                "layers": layer_descs}
    man_data = json.dumps(manifest).encode()
    man_digest = write_blob(blobs, man_data)
    desc: dict[str, Any] = {"mediaType": OCI_MANIFEST, "digest": man_digest, "size": len(man_data)}
    if ref_name:
        desc["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    with open(os.path.join(layout, "index.json"), "w") as out:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, out)
    with open(os.path.join(layout, "oci-layout"), "w") as out:
        json.dump({"imageLayoutVersion": "1.0.0"}, out)
    return BuiltImage(man_digest, cfg_digest, ids, [d["digest"] for d in layer_descs], total + len(cfg_data) + len(man_data))


def manifest_bytes(blobs: str, digest: str) -> bytes:
    with open(os.path.join(blobs, "sha256", digest.split(":")[1]), "rb") as src:
        return src.read()
