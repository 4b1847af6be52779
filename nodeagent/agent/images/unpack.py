"""Unpacking one image layer into a directory of its own, ready to be an overlayfs lowerdir.

Hand-written over the standard library's tarfile, because no packaged tool does this: `umoci raw
unpack` and `umoci unpack` flatten all layers into one root filesystem (deleting what whiteouts
hide), skopeo does not unpack at all, and containerd's per-layer snapshotter is Go code inside
containerd. Python's tarfile `data` filter (PEP 706) checks paths but strips setuid bits and
ownership and refuses the whiteout devices a layer must become, so it does not fit either.

One layer, one directory, every entry checked before anything is written:

- paths: absolute paths, `..` and empty names are refused; every parent is walked with
  O_NOFOLLOW|O_DIRECTORY from the layer root (openat, component by component), so no entry can
  be written through a symlink, whatever earlier entries made;
- links: hard links must name an earlier regular file or symlink of the same layer (never `../`,
  never absolute: a hard link to a host file would put it in the image); symlinks are stored as
  given, with any target (`/bin/sh -> busybox`, absolute targets): they are resolved inside the
  container's root at run time, and the agent never follows a link inside a layer;
- no device files (character, block); FIFOs are allowed;
- setuid/setgid: refused on a file that is group- or world-writable (anyone could replace what
  runs as its owner), setuid refused on directories (setgid on directories is ordinary);
- whiteouts (OCI image spec, layer.md): `.wh.NAME` becomes the overlayfs whiteout for NAME (a
  character device 0/0), `.wh..wh..opq` marks its directory opaque (xattr
  `trusted.overlay.opaque=y`); other `.wh..wh.` names (aufs bookkeeping) are skipped;
- space: before each file the filesystem must have its size plus `reserve` bytes free (statvfs,
  so other writers count too), and some inodes: a layer larger than the room left stops with
  NoSpace instead of filling the disk;
- ownership, mode and mtime come from the tar (numeric ids); extended attributes from PAX
  headers are not applied (so forged `trusted.overlay.*` attributes cannot reach overlayfs; the
  cost: file capabilities such as ping's cap_net_raw are lost).

The caller unpacks into a fresh temporary directory and renames it into the store only after
`syncfs`; a half-unpacked layer never carries a final name. Later entries replace earlier ones
of the same path (a tar may hold a path twice), as tar itself does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from nodeagent.agent.images.digest import CHUNK, HashingReader, algorithm_of, check
from nodeagent.agent.images.errors import BadLayer, DigestMismatch, NoSpace

if TYPE_CHECKING:  # imported by the functions that unpack: the agent's process needs them only
    import tarfile  # when it pulls an image (tarfile, gzip: ~0.3 MiB of RSS for every agent)

WHITEOUT_PREFIX = ".wh."
WHITEOUT_META_PREFIX = ".wh..wh."
WHITEOUT_OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
MIN_FREE_INODES = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

GZIP_TYPES = ("application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip",
              "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
              "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip")
ZSTD_TYPES = ("application/vnd.oci.image.layer.v1.tar+zstd",
              "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd")
TAR_TYPES = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar")
LAYER_TYPES = GZIP_TYPES + ZSTD_TYPES + TAR_TYPES


@dataclass
class LayerStats:
    """What one unpack wrote; `usage` is filled by disk_usage() after the rename."""

    entries: int = 0
    files: int = 0
    bytes: int = 0
    whiteouts: int = 0
    opaque_dirs: int = 0
    xattrs_skipped: int = 0


SpaceCheck = Callable[[int], None]


def statvfs_space(path: str, reserve: int) -> SpaceCheck:
    """A SpaceCheck that raises NoSpace when writing `n` bytes would leave less than `reserve`
    free (or fewer than MIN_FREE_INODES inodes) on the filesystem holding `path`."""

    def need(n: int) -> None:
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        if free - n < reserve:
            raise NoSpace(f"no space left on the image filesystem: {n} more bytes needed, {free} free, "
                          f"{reserve} kept in reserve")
        if st.f_files and st.f_favail < MIN_FREE_INODES:
            raise NoSpace(f"no inodes left on the image filesystem ({st.f_favail} free)")

    return need


def _split(name: str, what: str = "entry") -> list[str]:
    """Path components of a member name; BadLayer for absolute paths and `..`."""
    if name.startswith("/"):
        raise BadLayer(f"layer {what} {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadLayer(f"layer {what} {name!r} leaves the layer (`..`)")
    return parts


class _Tree:
    """The layer directory, reached only through O_NOFOLLOW opens below its root fd."""

    def __init__(self, root: str) -> None:
        self.root_fd = os.open(root, _DIR_FLAGS)
        self._cache: tuple[tuple[str, ...], int] | None = None

    def close(self) -> None:
        self._forget()
        os.close(self.root_fd)

    def _forget(self) -> None:
        if self._cache is not None:
            os.close(self._cache[1])
            self._cache = None

    def parent(self, parts: list[str], name: str, create: bool = True) -> int:
        """An fd (owned by the cache: do not close) of the directory holding parts[-1]."""
        key = tuple(parts[:-1])
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        self._forget()
        fd = os.dup(self.root_fd)
        try:
            for comp in key:
                fd = self._step(fd, comp, name, create)
        except BaseException:
            os.close(fd)
            raise
        self._cache = (key, fd)
        return fd

    @staticmethod
    def _step(fd: int, comp: str, name: str, create: bool) -> int:
        try:
            nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise BadLayer(f"layer entry {name!r}: {comp!r} does not exist in this layer") from None
            os.mkdir(comp, 0o755, dir_fd=fd)
            nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise BadLayer(f"layer entry {name!r}: {comp!r} is a symlink or a file, not a directory; "
                               "nothing is written through links") from None
            raise
        os.close(fd)
        return nfd

    def clear(self, pfd: int, base: str, keep_dir: bool) -> bool:
        """Remove what is at `base` (a later entry replaces it); True if a directory was kept."""
        try:
            st = os.stat(base, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            if keep_dir:
                return True
            self._forget_below()
            shutil.rmtree(base, dir_fd=pfd)
        else:
            os.unlink(base, dir_fd=pfd)
        return False

    def _forget_below(self) -> None:
        # the cached parent may lie inside the directory about to go; `parent()` reopens it
        if self._cache is not None and self._cache[0]:
            self._forget()


def _check_mode(member: tarfile.TarInfo) -> None:
    mode = member.mode
    special = mode & (stat.S_ISUID | stat.S_ISGID)
    if member.isreg() and special and mode & 0o022:
        raise BadLayer(f"layer entry {member.name!r}: setuid/setgid file writable by group or others "
                       f"(mode {mode:04o})")
    if member.isdir() and mode & stat.S_ISUID:
        raise BadLayer(f"layer entry {member.name!r}: setuid directory (mode {mode:04o})")


def _apply_meta(member: tarfile.TarInfo, pfd: int, base: str, fd: int | None) -> None:
    """Owner first (chown clears setuid), then mode, then mtime; never through a symlink."""
    if fd is not None:
        os.fchown(fd, member.uid, member.gid)
        os.fchmod(fd, member.mode & 0o7777)
        os.utime(fd, (member.mtime, member.mtime))
        return
    os.chown(base, member.uid, member.gid, dir_fd=pfd, follow_symlinks=False)
    if not member.issym():
        os.chmod(base, member.mode & 0o7777, dir_fd=pfd)  # just made by us, not a link
    os.utime(base, (member.mtime, member.mtime), dir_fd=pfd, follow_symlinks=False)


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, base: str, space: SpaceCheck) -> int:
    space(member.size)
    src = tar.extractfile(member)
    if src is None:
        raise BadLayer(f"layer entry {member.name!r}: no data")
    fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=pfd)
    written = 0
    try:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            if written and written % (64 * CHUNK) == 0:
                space(min(member.size - written, 64 * CHUNK))  # big files: look again as they grow
            os.write(fd, chunk)
            written += len(chunk)
        _apply_meta(member, pfd, base, fd)
    finally:
        os.close(fd)
    return written


def unpack_tar(stream: IO[bytes], dest: str, space: SpaceCheck) -> LayerStats:
    """Extract an uncompressed tar stream into the empty directory `dest`, under the rules above."""
    import gzip
    import tarfile

    stats = LayerStats()
    tree = _Tree(dest)
    try:
        with tarfile.open(fileobj=stream, mode="r|", errorlevel=2) as tar:
            for member in tar:
                _extract(tar, member, tree, space, stats)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, UnicodeError) as e:
        raise BadLayer(f"layer is not a valid tar archive: {e}") from None
    except Exception as e:
        if _is_zstd_error(e):
            raise BadLayer(f"layer cannot be decompressed: {e}") from None
        raise
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise NoSpace(f"no space left on the image filesystem: {e.strerror}") from None
        if e.errno == errno.EDQUOT:
            raise NoSpace(f"quota exceeded on the image filesystem: {e.strerror}") from None
        if e.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EEXIST):
            raise BadLayer(f"layer entry cannot be created: {e}") from None
        raise
    finally:
        tree.close()
    return stats


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, tree: _Tree, space: SpaceCheck, stats: LayerStats) -> None:
    stats.entries += 1
    stats.xattrs_skipped += sum(1 for k in member.pax_headers if k.startswith("SCHILY.xattr."))
    parts = _split(member.name)
    if not parts:  # the layer root itself ("./"): its owner and mode
        if member.isdir():
            _check_mode(member)
            _apply_meta(member, tree.root_fd, "", tree.root_fd)
            return
        raise BadLayer(f"layer entry {member.name!r}: the root of a layer must be a directory")
    base = parts[-1]
    if base.startswith(WHITEOUT_PREFIX):
        _whiteout(member, parts, tree, stats)
        return
    _check_mode(member)
    if member.ischr() or member.isblk():
        raise BadLayer(f"layer entry {member.name!r}: device files are not allowed in images")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk() or member.isfifo()):
        raise BadLayer(f"layer entry {member.name!r}: unsupported tar entry type {member.type!r}")
    pfd = tree.parent(parts, member.name)
    kept_dir = tree.clear(pfd, base, keep_dir=member.isdir())
    if member.isdir():
        if not kept_dir:
            os.mkdir(base, 0o700, dir_fd=pfd)
        fd = os.open(base, _DIR_FLAGS, dir_fd=pfd)
        try:
            _apply_meta(member, pfd, base, fd)
        finally:
            os.close(fd)
    elif member.isreg():
        stats.bytes += _write_file(tar, member, pfd, base, space)
        stats.files += 1
    elif member.issym():
        space(0)
        os.symlink(member.linkname, base, dir_fd=pfd)
        _apply_meta(member, pfd, base, None)
    elif member.islnk():
        _hardlink(member, parts, tree, pfd, base)
    else:  # FIFO
        space(0)
        os.mkfifo(base, 0o600, dir_fd=pfd)
        _apply_meta(member, pfd, base, None)


def _hardlink(member: tarfile.TarInfo, parts: list[str], tree: _Tree, pfd: int, base: str) -> None:
    target = _split(member.linkname, "hard link target")
    if not target:
        raise BadLayer(f"layer entry {member.name!r}: hard link to the layer root")
    # the target's parent is walked with the same no-follow rule (no creation): a dedicated fd,
    # since the cached one is the link's own parent
    sfd = os.dup(tree.root_fd)
    try:
        for comp in target[:-1]:
            sfd = _Tree._step(sfd, comp, member.name, create=False)
        try:
            st = os.stat(target[-1], dir_fd=sfd, follow_symlinks=False)
        except FileNotFoundError:
            raise BadLayer(f"layer entry {member.name!r}: hard link target {member.linkname!r} is not "
                           "an earlier entry of this layer") from None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise BadLayer(f"layer entry {member.name!r}: hard link to {member.linkname!r}, which is not a "
                           "regular file or symlink")
        os.link(target[-1], base, src_dir_fd=sfd, dst_dir_fd=pfd, follow_symlinks=False)
    finally:
        os.close(sfd)


def _whiteout(member: tarfile.TarInfo, parts: list[str], tree: _Tree, stats: LayerStats) -> None:
    base = parts[-1]
    pfd = tree.parent(parts, member.name)
    if base == WHITEOUT_OPAQUE:
        os.setxattr(pfd, OPAQUE_XATTR, b"y")
        stats.opaque_dirs += 1
        return
    if base.startswith(WHITEOUT_META_PREFIX):
        return  # aufs metadata (.wh..wh.plnk, .wh..wh.aufs): meaningless for overlayfs
    hidden = base[len(WHITEOUT_PREFIX):]
    if not hidden or hidden in (".", ".."):
        raise BadLayer(f"layer entry {member.name!r}: whiteout of nothing")
    tree.clear(pfd, hidden, keep_dir=False)
    os.mknod(hidden, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=pfd)
    stats.whiteouts += 1


def _decompressor(media_type: str, stream: HashingReader) -> Any:
    if media_type in GZIP_TYPES:
        import gzip

        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[call-overload]
    if media_type in ZSTD_TYPES:
        import zstandard  # only layers that need it pay for the import

        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)  # type: ignore[arg-type]
    if media_type in TAR_TYPES:
        return stream
    raise BadLayer(f"unsupported layer media type {media_type!r}")


def unpack_blob(blob: str, media_type: str, digest: str, size: int | None, diff_id: str | None, dest: str,
                space: SpaceCheck) -> LayerStats:
    """Unpack the layer blob at `blob` into `dest`, checking the compressed content against
    `digest`/`size` and the uncompressed tar against `diff_id` (the config's rootfs.diff_ids)."""
    import gzip

    with open(blob, "rb") as raw:
        compressed = HashingReader(raw, algorithm_of(digest))
        plain = _decompressor(media_type, compressed)
        tar_stream = HashingReader(plain, algorithm_of(diff_id) if diff_id else "sha256")
        stats = unpack_tar(tar_stream, dest, space)  # type: ignore[arg-type]
        try:
            tar_stream.drain()  # the zero blocks after the end-of-archive marker, the gzip trailer
            compressed.drain()
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise BadLayer(f"layer {digest}: cannot be decompressed: {e}") from None
        except Exception as e:
            if _is_zstd_error(e):
                raise BadLayer(f"layer {digest}: cannot be decompressed: {e}") from None
            raise
    check(f"layer {digest}", digest, compressed.digest, size, compressed.count)
    if diff_id is not None and tar_stream.digest != diff_id:
        raise DigestMismatch(f"layer {digest}: uncompressed content hashes to {tar_stream.digest}, "
                             f"the image config's diff_id is {diff_id}")
    return stats


def _is_zstd_error(e: Exception) -> bool:
    return type(e).__module__.startswith("zstandard") or type(e).__name__ == "ZstdError"


def disk_usage(path: str) -> int:
    """Bytes the tree at `path` occupies (st_blocks, each inode once), not following links."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [path]
    while stack:
        d = stack.pop()
        st = os.lstat(d)
        total += st.st_blocks * 512
        with os.scandir(d) as it:
            for entry in it:
                est = entry.stat(follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                if est.st_nlink > 1:
                    key = (est.st_dev, est.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += est.st_blocks * 512
    return total


_libc: Any = None


def syncfs(path: str) -> None:
    """syncfs(2) on the filesystem holding `path`: one call makes a whole unpacked layer durable
    (fsync of every file would cost one disk flush per file)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["LAYER_TYPES", "OPAQUE_XATTR", "LayerStats", "SpaceCheck", "disk_usage", "fsync_dir", "statvfs_space",
           "syncfs", "unpack_blob", "unpack_tar"]

