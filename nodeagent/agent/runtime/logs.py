"""Container log files: where they live, size-capped rotation, reading the tail.

Layout (the kubelet's /var/log/pods layout, under the agent's state directory):

    <stateDir>/pods/<namespace>_<name>_<uid>/<container>/<restartCount>.log

One file per run of the container, so the previous run's output stays readable
(`kubectl logs --previous`); a new run prunes every older run but the previous one, as the
kubelet's container GC keeps one dead container per name. The running process writes its own file
through an O_APPEND descriptor it opened itself (see spawn.py): the agent holds no pipe to it.

Rotation: when a file grows past `max_size` (default 10Mi, the kubelet's containerLogMaxSize) its
content moves to `<n>.log.1` (older copies shift to .2, .3 ...); at most `max_files` files exist per
run (default 5, containerLogMaxFiles, the live file included). The writer's descriptor cannot be
swapped from outside, so the live file is cut in place, not renamed:
- copy-collapse (ext4, xfs): the whole blocks at the head are copied, then removed with
  fallocate(FALLOC_FL_COLLAPSE_RANGE), which the kernel does under the inode lock: nothing the
  container appends meanwhile is lost, and the tail of the last partial block stays live (a line
  cut there reads as one line through `tail`).
- copy-truncate (anywhere else, e.g. tmpfs): copy everything, catch up with what was appended
  during the copy, truncate to zero; an O_APPEND writer simply continues at offset 0. What lands
  between that last read and the truncate is lost: the known cost of copy-truncate.
Rotated files are plain text (the kubelet gzips them).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.core.errors import FieldError

DEFAULT_MAX_SIZE = 10 * 1024 * 1024  # containerLogMaxSize 10Mi
DEFAULT_MAX_FILES = 5  # containerLogMaxFiles
DIR_MODE = 0o750
_BLOCK = 64 * 1024
_FALLOC_FL_COLLAPSE_RANGE = 0x08
_RUN_LOG = re.compile(r"^(\d+)\.log(?:\.(\d+))?(?:\.times)?$")  # the times side file too (logtimes.py)


def pod_log_dir(state_dir: str, namespace: str, name: str, uid: str) -> str:
    for field, value in (("namespace", namespace), ("name", name), ("uid", uid)):
        if not value or "/" in value or "\0" in value or value in (".", ".."):
            raise FieldError(f"metadata.{field}", f"{value!r} cannot be part of a log path")
    return os.path.join(state_dir, "pods", f"{namespace}_{name}_{uid}")


def container_log_dir(state_dir: str, namespace: str, name: str, uid: str, container: str) -> str:
    return container_dir(pod_log_dir(state_dir, namespace, name, uid), container)


def container_dir(pod_dir: str, container: str) -> str:
    """A container's log directory inside its pod's (pod_log_dir)."""
    if not container or "/" in container or "\0" in container or container in (".", ".."):
        raise FieldError("container", f"{container!r} cannot be part of a log path")
    return os.path.join(pod_dir, container)


def run_log_path(container_dir: str, restart_count: int) -> str:
    if restart_count < 0:
        raise FieldError("restart_count", f"{restart_count} must not be negative")
    return os.path.join(container_dir, f"{restart_count}.log")


def prepare_log_dir(container_dir: str) -> None:
    os.makedirs(container_dir, mode=DIR_MODE, exist_ok=True)


def _check_limits(max_size: int, max_files: int) -> None:
    if max_size <= 0:
        raise FieldError("containerLogMaxSize", f"{max_size} must be positive")
    if max_files < 2:
        raise FieldError("containerLogMaxFiles", f"{max_files} must be greater than 1")


def rotated_files(path: str) -> list[str]:
    """Existing rotated copies of `path`, newest first (.1, .2, ...)."""
    out = []
    k = 1
    while os.path.exists(f"{path}.{k}"):
        out.append(f"{path}.{k}")
        k += 1
    return out


def _copy_range(src: int, dst: int, offset: int, end: int | None = None) -> int:
    """Copy src from `offset` up to `end` (None: its current end) into dst; returns the new offset."""
    while end is None or offset < end:
        count = _BLOCK * 16 if end is None else min(_BLOCK * 16, end - offset)
        try:
            n = os.copy_file_range(src, dst, count, offset)
        except OSError:  # filesystems without copy_file_range: plain reads
            data = os.pread(src, count, offset)
            n = len(data)
            if n:
                os.write(dst, data)
        if n == 0:
            break
        offset += n
    return offset


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "fallocate64", None) or libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return, unused-ignore]  # a ctypes function (Any on some stubs)


_fallocate = _load_fallocate()


def _collapse_head(fd: int, length: int) -> bool:
    """Remove the first `length` bytes in place (FALLOC_FL_COLLAPSE_RANGE); False if unsupported."""
    if _fallocate is None:
        return False
    return _fallocate(fd, _FALLOC_FL_COLLAPSE_RANGE, 0, length) == 0


def rotate(path: str, max_size: int = DEFAULT_MAX_SIZE, max_files: int = DEFAULT_MAX_FILES) -> bool:
    """Rotate `path` if it is larger than `max_size`; True when it rotated.

    Called by the housekeeping loop for every live log; cheap when nothing is due (one stat).
    """
    _check_limits(max_size, max_files)
    try:
        if os.stat(path).st_size <= max_size:
            return False
    except FileNotFoundError:
        return False
    keep = max_files - 1  # rotated copies besides the live file
    for k in range(keep, 0, -1):
        older = f"{path}.{k}"
        if os.path.exists(older):
            if k == keep:
                os.unlink(older)
            else:
                os.replace(older, f"{path}.{k + 1}")
    k = keep + 1  # copies beyond the limit (left by a larger max_files earlier)
    while os.path.exists(f"{path}.{k}"):
        os.unlink(f"{path}.{k}")
        k += 1
    tmp = f"{path}.1.tmp"
    src = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        st = os.fstat(src)
        cut = st.st_size // st.st_blksize * st.st_blksize
        if cut >= st.st_size:
            cut -= st.st_blksize  # the collapsed range must end before EOF
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        try:
            offset = 0
            if cut > 0:
                offset = _copy_range(src, dst, 0, cut)
                if _collapse_head(src, cut):  # lossless: appends meanwhile stay in the live file
                    cut = -1
            if cut != -1:  # copy-truncate
                offset = _copy_range(src, dst, offset)
                _copy_range(src, dst, offset)  # catch up with what was appended meanwhile
                os.ftruncate(src, 0)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    os.replace(tmp, f"{path}.1")
    return True


def prune_runs(container_dir: str, current_restart: int) -> list[str]:
    """Remove logs of runs older than the previous one; returns the removed paths."""
    removed: list[str] = []
    try:
        names = os.listdir(container_dir)
    except FileNotFoundError:
        return removed
    for name in names:
        m = _RUN_LOG.match(name)
        if m and int(m.group(1)) < current_restart - 1:
            p = os.path.join(container_dir, name)
            os.unlink(p)
            removed.append(p)
    return removed


def remove_pod_dir(pod_dir: str) -> None:
    """Delete a pod's whole log directory (pod_log_dir; pod garbage collection, disk-pressure
    reclaim); gone already is fine."""
    shutil.rmtree(pod_dir, ignore_errors=True)


def tail_bytes(path: str, n: int) -> tuple[bytes, int]:
    """The last `n` lines of a run's log as its raw bytes, reading back through the rotated copies
    as one stream, and the live file's size when it was read (where a follower goes on from).

    A final line without newline counts; a line cut in two by a rotation reads as one line.
    """
    if n < 0:
        raise FieldError("tailLines", f"{n} must not be negative")
    live_size = 0
    chunks: list[bytes] = []  # newest first
    newlines = 0
    complete = True  # reached the very beginning of the oldest copy
    for i, p in enumerate([path, *rotated_files(path)]):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            pos = os.fstat(fd).st_size
            if i == 0:
                live_size = pos
            while n and pos > 0 and newlines <= n:
                step = min(_BLOCK, pos)
                pos -= step
                data = os.pread(fd, step, pos)
                chunks.append(data)
                newlines += data.count(b"\n")
        finally:
            os.close(fd)
        if newlines > n:
            complete = False
            break
    if n == 0:
        return b"", live_size
    data = b"".join(reversed(chunks))
    lines = data.split(b"\n")
    ends_open = bool(lines) and lines[-1] != b""  # the last line has no newline yet
    if not ends_open:
        lines.pop()
    if not complete:
        lines = lines[1:]  # the first piece may be the end of a longer line
    kept = lines[-n:]
    return b"\n".join(kept) + (b"" if ends_open or not kept else b"\n"), live_size


def tail(path: str, n: int = 100) -> list[str]:
    """The last `n` lines of a run's log (tail_bytes), decoded, without their newlines."""
    data, _ = tail_bytes(path, n)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8", "replace") for line in lines]


class LogUnavailable(Exception):
    """The log asked for does not exist (yet): a container waiting to start, no previous run.
    The message is the kubelet's (a 400 BadRequest)."""


@dataclass(frozen=True)
class LogSource:
    """One run's log file and whether that run can still write to it (a follower stops once it
    cannot and everything is read)."""

    path: str
    running: Callable[[], bool]


class LogReader:
    """A run's log read forward: what is left of the rotated copies (oldest first), then the live
    file from an offset. Blocking reads (call in a thread); close() when done.

    The rotated copies are opened at once, so a rotation renaming them meanwhile changes nothing.
    The live file is cut in place by `rotate`: its head moves to a new `.1` (copy-collapse) or all
    of it does and it is truncated (copy-truncate). A new `.1` (another inode) tells that happened:
    the part of it not read yet is read first, and the offset moves back by its size. One rotation
    between two reads is followed exactly; two would lose the middle copy's unread part.
    With `until_size` the live file is read only up to that size (a read without follow ends at
    what existed when it began, however fast the container writes).
    """

    def __init__(self, path: str, offset: int = 0, *, rotated: bool = False, until_size: int | None = None) -> None:
        self.path = path
        self.offset = offset
        self.until_size = until_size
        self._pending: list[tuple[int, int, int | None]] = []  # (fd, position, end or None: to EOF)
        if rotated:
            for p in reversed(rotated_files(path)):
                with contextlib.suppress(FileNotFoundError):
                    self._pending.append((os.open(p, os.O_RDONLY | os.O_CLOEXEC), 0, None))
        self._rotated = file_identity(path + ".1")
        self._fd: int | None = None

    @classmethod
    def whole(cls, path: str, *, follow: bool) -> LogReader:
        """Everything the run wrote, rotated copies included."""
        size = None if follow else _size(path)
        return cls(path, 0, rotated=True, until_size=size)

    def read(self, max_bytes: int = _BLOCK * 4) -> bytes:
        """The next bytes (at most `max_bytes`); b"" when there is nothing new yet."""
        while self._pending:
            fd, pos, end = self._pending[0]
            count = max_bytes if end is None else min(max_bytes, end - pos)
            data = os.pread(fd, count, pos) if count > 0 else b""
            if data:
                self._pending[0] = (fd, pos + len(data), end)
                return data
            os.close(fd)
            self._pending.pop(0)
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return b""
        if self.until_size is None and self._rotation():
            return self.read(max_bytes)
        count = max_bytes if self.until_size is None else min(max_bytes, self.until_size - self.offset)
        data = os.pread(self._fd, count, self.offset) if count > 0 else b""
        self.offset += len(data)
        return data

    def _rotation(self) -> bool:
        """Take a rotation since the last read into account; True if there was one."""
        ident = file_identity(self.path + ".1")
        if ident is None or ident == self._rotated:
            return False
        self._rotated = ident
        moved = ident[1]
        try:
            fd = os.open(self.path + ".1", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        if os.fstat(fd).st_ino != ident[0] or self.offset >= moved:
            os.close(fd)
        else:
            self._pending.append((fd, self.offset, moved))
        assert self._fd is not None
        live = os.fstat(self._fd).st_size
        self.offset = max(0, self.offset - moved)
        if self.offset > live:  # copy-truncate lost what came between its last copy and the truncate
            self.offset = 0
        return True

    def close(self) -> None:
        for fd, _, _ in self._pending:
            os.close(fd)
        self._pending = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def file_identity(path: str) -> tuple[int, int] | None:
    """(inode, size) of a file, None if it is not there."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
