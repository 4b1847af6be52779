"""The kubelet's atomic writer (pkg/volume/util/atomic_writer.go) for the files of configMap,
secret, downwardAPI and projected volumes: a reader in the container sees the old set of files or
the new one, never half of each (blocking: call off the loop).

Layout of a volume's directory (as upstream, so tools that know it keep working):

    ..2026_12_07_02_41_21.123456/   one generation: the files, with their modes
    ..data -> ..2026_12_07_02_41_21.123456
    key    -> ..data/key            one link per top-level name of the payload

An update writes a new generation next to the old one, points `..data_tmp` at it and renames it
over `..data` (rename(2) of a symlink is atomic), then adds links for new top-level names, removes
the names no longer in the payload and the old generation. An unchanged payload (same paths,
bytes and modes) writes nothing. Entries not starting with ".." that are not links of the payload
(files an older agent wrote directly into the directory) are replaced by links. A subPath mount
binds the file of the generation it resolved to, so it keeps that file (not refreshed, as
upstream). Paths come checked from admission (relative, no ".."); names starting with ".." are
the writer's own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable

import structlog

from nodeagent.agent.images.unpack import fsync_dir
from nodeagent.agent.pods.volume_files import VolumeFile

log = structlog.get_logger(__name__)

DATA = "..data"
DATA_TMP = "..data_tmp"
Payload = dict[str, tuple[bytes, int]]  # relative path -> (bytes, mode)


def payload(files: Iterable[VolumeFile]) -> Payload:
    """The files as the writer compares them (a later file of the same path wins)."""
    return {f.path: (f.data, f.mode & 0o7777) for f in files}


def _generation(root: str) -> str | None:
    """The name `..data` points at, when it is one of the writer's (a plain `..` name in root)."""
    data = os.path.join(root, DATA)
    if not os.path.islink(data):
        return None
    name = os.readlink(data)
    return name if name.startswith("..") and "/" not in name and name not in (DATA, DATA_TMP, "..") else None


def current(root: str) -> Payload | None:
    """What the directory's current generation holds; None without one (never written, or an
    older agent's plain files)."""
    name = _generation(root)
    if name is None or not os.path.isdir(os.path.join(root, name)):
        return None
    gen = os.path.join(root, name)
    out: Payload = {}
    for d, _dirs, names in os.walk(gen, followlinks=False):
        for n in names:
            path = os.path.join(d, n)
            st = os.lstat(path)
            with open(path, "rb") as f:
                out[os.path.relpath(path, gen)] = (f.read(), st.st_mode & 0o7777)
    return out


def _remove(path: str) -> None:
    """A link or file unlinked, a directory removed; never followed."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _write_generation(root: str, files: Payload) -> str:
    """A new generation directory with the files (each fsynced); its name."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    gen = tempfile.mkdtemp(prefix=stamp, dir=root)
    os.chmod(gen, 0o755)
    for rel, (data, mode) in sorted(files.items()):
        target = os.path.normpath(os.path.join(gen, rel))
        if not target.startswith(gen + os.sep):
            raise ValueError(f"{rel}: leaves the volume")
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    return os.path.basename(gen)


def write(root: str, files: Iterable[VolumeFile]) -> bool:
    """Make the directory hold exactly `files` (see the module); True when a new generation was
    written, False when the payload was already there."""
    wanted = payload(files)
    os.makedirs(root, mode=0o755, exist_ok=True)
    old = _generation(root)
    if old is not None and current(root) == wanted:
        return False
    gen = _write_generation(root, wanted)
    tmp = os.path.join(root, DATA_TMP)
    _remove(tmp)
    os.symlink(gen, tmp)
    os.rename(tmp, os.path.join(root, DATA))  # the switch: every reader through ..data sees `gen` from here
    tops = {rel.split("/", 1)[0] for rel in wanted}
    for name in sorted(tops):
        link, target = os.path.join(root, name), os.path.join(DATA, name)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        _remove(link)  # an older agent's plain file or directory
        os.symlink(target, link)
    for name in os.listdir(root):
        if not name.startswith("..") and name not in tops:
            _remove(os.path.join(root, name))
    if old is not None and old != gen:
        _remove(os.path.join(root, old))
    fsync_dir(root)
    return True
