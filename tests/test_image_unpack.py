"""Layer unpacking: ordinary entries, OCI whiteouts as overlayfs whiteouts, and hostile tars
(built here entry by entry) refused without writing anything outside the layer directory.

Whiteout devices (mknod), ownership and the trusted.* xattr need root: those tests say so and
skip for other users (the CI runs them as root)."""

from __future__ import annotations

import gzip
import io
import os
import stat
from pathlib import Path

import pytest
from image_builder import (
    LAYER_GZIP,
    LAYER_TAR,
    LAYER_ZSTD,
    Entry,
    blk_dev,
    chr_dev,
    compress,
    d,
    f,
    fifo,
    hard,
    sha,
    sym,
    tar_bytes,
)

from nodeagent.agent.images.errors import BadLayer, DigestMismatch, NoSpace
from nodeagent.agent.images.unpack import OPAQUE_XATTR, disk_usage, statvfs_space, unpack_blob, unpack_tar

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mknod of whiteouts, chown and trusted.* xattrs need root")


def no_limit(n: int) -> None:
    return None


def unpack(tmp_path: Path, entries: list[Entry]) -> tuple[Path, object]:
    dest = tmp_path / "layer"
    dest.mkdir()
    stats = unpack_tar(io.BytesIO(tar_bytes(entries)), str(dest), no_limit)
    return dest, stats


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@needs_root
def test_ordinary_entries(tmp_path: Path) -> None:
    dest, stats = unpack(tmp_path, [
        d("bin"), f("bin/busybox", b"\x7fELF...", 0o755), sym("bin/sh", "busybox"),
        sym("etc-localtime", "/usr/share/zoneinfo/UTC"),  # absolute targets are kept as they are
        hard("bin/ls", "bin/busybox"), f("usr/lib/deep/file", b"x"),  # parents made implicitly
        f("usr/bin/passwd", b"suid", 0o4755), d("tmp", 0o1777), d("var/mail", 0o2775, gid=8),
        f("home/u/.profile", b"p", uid=1000, gid=1000), fifo("run/fifo"),
        f("dup", b"first"), f("dup", b"second"),  # a later entry replaces an earlier one
    ])
    assert (dest / "bin/busybox").read_bytes() == b"\x7fELF..."
    assert os.readlink(dest / "bin/sh") == "busybox"
    assert os.readlink(dest / "etc-localtime") == "/usr/share/zoneinfo/UTC"
    assert os.stat(dest / "bin/ls").st_ino == os.stat(dest / "bin/busybox").st_ino
    assert stat.S_IMODE(os.stat(dest / "usr/bin/passwd").st_mode) == 0o4755  # chown did not clear it
    assert stat.S_IMODE(os.stat(dest / "tmp").st_mode) == 0o1777
    assert stat.S_IMODE(os.stat(dest / "var/mail").st_mode) == 0o2775
    st = os.stat(dest / "home/u/.profile")
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert stat.S_ISFIFO(os.stat(dest / "run/fifo").st_mode)
    assert (dest / "dup").read_bytes() == b"second"
    assert os.stat(dest / "bin/busybox").st_mtime == 1_700_000_000
    assert stats.files == 6  # type: ignore[attr-defined]


@needs_root
def test_whiteouts_become_overlayfs_whiteouts(tmp_path: Path) -> None:
    dest, stats = unpack(tmp_path, [
        d("etc"), f("etc/.wh.passwd"), d("opt/app"), f("opt/app/.wh..wh..opq"), f("opt/app/new", b"n"),
        f(".wh.gone-dir"), f("var/.wh..wh.plnk"),  # aufs bookkeeping: skipped
    ])
    for path in ("etc/passwd", "gone-dir"):
        st = os.lstat(dest / path)
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0), path
    assert os.getxattr(dest / "opt/app", OPAQUE_XATTR) == b"y"
    assert (dest / "opt/app/new").read_bytes() == b"n"  # the opaque dir keeps this layer's own entries
    assert not (dest / "etc/.wh.passwd").exists() and not (dest / "var/.wh..wh.plnk").exists()
    assert stats.whiteouts == 2 and stats.opaque_dirs == 1  # type: ignore[attr-defined]


def test_xattrs_in_pax_headers_are_not_applied(tmp_path: Path) -> None:
    forged = {"SCHILY.xattr.trusted.overlay.opaque": "y", "SCHILY.xattr.user.x": "1"}
    dest, stats = unpack(tmp_path, [d("dir", pax=forged), f("dir/file", b"x", mode=0o644)])
    assert OPAQUE_XATTR not in os.listxattr(dest / "dir")
    assert stats.xattrs_skipped == 2  # type: ignore[attr-defined]


HOSTILE = [
    ("dotdot", [f("../escaped", b"x")], "leaves the layer"),
    ("dotdot inside", [f("a/../../escaped", b"x")], "leaves the layer"),
    ("absolute", [f("/escaped", b"x")], "absolute path"),
    ("write through a symlink", [sym("link", "{outside}"), f("link/escaped", b"x")], "symlink or a file"),
    ("symlinked parent deeper", [d("a"), sym("a/b", "{outside}"), f("a/b/c/escaped", b"x")], "symlink or a file"),
    ("hard link out with ..", [hard("h", "../outside-file")], "leaves the layer"),
    ("hard link to an absolute path", [hard("h", "/etc/passwd")], "absolute path"),
    ("hard link to a host file through a symlink", [sym("s", "/etc"), hard("h", "s/passwd")], "symlink or a file"),
    ("hard link to nothing", [hard("h", "missing")], "not an earlier entry"),
    ("hard link to a directory", [d("dir"), hard("h", "dir")], "not a regular file"),
    ("character device", [chr_dev("dev/mem", 1, 1)], "device files"),
    ("block device", [blk_dev("dev/sda")], "device files"),
    ("whiteout device smuggled as a device", [chr_dev("x", 0, 0)], "device files"),
    ("setuid and world-writable", [f("bin/su", b"x", 0o4777)], "setuid/setgid file writable"),
    ("setgid and group-writable", [f("bin/sg", b"x", 0o2775)], "setuid/setgid file writable"),
    ("setuid directory", [d("dir", 0o4755)], "setuid directory"),
    ("root that is a file", [f("./", b"x")], "must be a directory"),
]


@pytest.mark.parametrize("name, entries, why", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_tars_are_refused(tmp_path: Path, name: str, entries: list[Entry], why: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "outside-file").write_text("host")
    for e in entries:
        e.linkname = e.linkname.replace("{outside}", str(outside))
    before = tree(tmp_path)
    with pytest.raises(BadLayer, match=why):
        unpack(tmp_path, entries)
    after = [p for p in tree(tmp_path) if not p.startswith("layer")]
    assert after == [p for p in before if not p.startswith("layer")], "something was written outside the layer"
    assert not list(outside.iterdir())
    assert (tmp_path / "outside-file").read_text() == "host"


@pytest.mark.parametrize("data, why", [
    (b"this is not a tar file at all" * 40, "not a valid tar"),
    (tar_bytes([f("a", b"x" * 5000)])[:1500], "not a valid tar"),  # cut in the middle of a file
])
def test_malformed_tars(tmp_path: Path, data: bytes, why: str) -> None:
    dest = tmp_path / "layer"
    dest.mkdir()
    with pytest.raises(BadLayer, match=why):
        unpack_tar(io.BytesIO(data), str(dest), no_limit)


def test_space_is_checked_before_each_file(tmp_path: Path) -> None:
    budget = [10_000]

    def space(n: int) -> None:
        if n > budget[0]:
            raise NoSpace(f"{n} bytes do not fit")
        budget[0] -= n

    dest = tmp_path / "layer"
    dest.mkdir()
    with pytest.raises(NoSpace):
        unpack_tar(io.BytesIO(tar_bytes([f("small", b"x" * 100), f("huge", b"y" * 20_000)])), str(dest), space)
    assert not (dest / "huge").exists()


def test_statvfs_space_keeps_the_reserve(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    statvfs_space(str(tmp_path), 0)(1)
    with pytest.raises(NoSpace, match="kept in reserve"):
        statvfs_space(str(tmp_path), free)(1 << 20)


def _blob(tmp_path: Path, tar: bytes, media_type: str) -> tuple[str, str, int]:
    data = compress(tar, media_type)
    path = tmp_path / "blob"
    path.write_bytes(data)
    return str(path), sha(data), len(data)


@needs_root
@pytest.mark.parametrize("media_type", [LAYER_GZIP, LAYER_TAR, LAYER_ZSTD])
def test_blob_checked_against_digest_and_diff_id(tmp_path: Path, media_type: str) -> None:
    tar = tar_bytes([f("hello", b"world")])
    blob, digest, size = _blob(tmp_path, tar, media_type)
    dest = tmp_path / "ok"
    dest.mkdir()
    unpack_blob(blob, media_type, digest, size, sha(tar), str(dest), no_limit)
    assert (dest / "hello").read_bytes() == b"world"
    assert disk_usage(str(dest)) > 0
    for wrong in (dict(digest="sha256:" + "0" * 64), dict(diff_id="sha256:" + "1" * 64), dict(size=size + 1)):
        target = tmp_path / f"bad-{len(list(tmp_path.iterdir()))}"
        target.mkdir()
        args = dict(digest=digest, size=size, diff_id=sha(tar)) | wrong
        with pytest.raises(DigestMismatch):
            unpack_blob(blob, media_type, args["digest"], args["size"], args["diff_id"], str(target),  # type: ignore[arg-type]
                        no_limit)


def test_garbage_gzip_is_a_bad_layer(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"\x1f\x8b" + os.urandom(4000))
    dest = tmp_path / "l"
    dest.mkdir()
    with pytest.raises(BadLayer):
        unpack_blob(str(path), LAYER_GZIP, sha(path.read_bytes()), None, None, str(dest), no_limit)
    truncated = gzip.compress(tar_bytes([f("a", os.urandom(50_000))]))[:20_000]
    path.write_bytes(truncated)
    dest2 = tmp_path / "l2"
    dest2.mkdir()
    with pytest.raises(BadLayer):
        unpack_blob(str(path), LAYER_GZIP, sha(truncated), None, None, str(dest2), no_limit)


def test_unknown_media_type(tmp_path: Path) -> None:
    blob, digest, size = _blob(tmp_path, tar_bytes([f("a")]), LAYER_TAR)
    with pytest.raises(BadLayer, match="unsupported layer media type"):
        unpack_blob(blob, "application/x-rar", digest, size, None, str(tmp_path), no_limit)
