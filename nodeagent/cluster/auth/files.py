"""Private files written atomically: keys and certificates never exist half-written or readable
by others. Blocking (it fsyncs): call it before the event loop serves, or from a thread."""

from __future__ import annotations

import os
from pathlib import Path


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) mode 0700; an existing directory is tightened to 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write `data` to `path` atomically: a temp file in the same directory created with `mode`
    (never wider), fsync, rename over the target, fsync the directory."""
    directory = path.parent
    tmp = directory / f".{path.name}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
