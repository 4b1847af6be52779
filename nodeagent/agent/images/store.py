"""The image store on imagefs: blobs, unpacked layers, image records and leases (synchronous I/O;
the ImageManager runs it off the event loop and serialises what changes it).

    <root>/blobs/sha256/<hex>       every blob by digest (skopeo's shared blob directory)
    <root>/layers/sha256/<hex>/     one unpacked layer per diff_id: an overlayfs lowerdir
    <root>/records/<hex>.json       one image (named by its config digest): names, layers, config
    <root>/leases/<holder>.json     a container's hold on an image: never removed while it exists
    <root>/tmp/                     pulls and unpacks in progress; emptied when the store opens

An image exists once its record does, and the record is written last (temp file, fsync, rename,
fsync of the directory), after every layer it names has been unpacked, synced (syncfs) and renamed
to its final name. So a crash at any point leaves either the image or nothing that looks like
one: stray blobs and layers without a record are removed by `sweep()`, and tmp/ is emptied.
Blobs are checked against their digests whenever they are read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass, replace

import structlog

from nodeagent.agent.images.digest import blob_path, read_verified
from nodeagent.agent.images.errors import BadLayer, DigestMismatch, InUse, NotPresent, PullFailed
from nodeagent.agent.images.records import (
    INDEX_TYPES,
    ImageRecord,
    Layer,
    parse_config,
    parse_index,
    parse_manifest,
    record_from_json,
)
from nodeagent.agent.images.reference import ImageRef
from nodeagent.agent.images.unpack import SpaceCheck, disk_usage, fsync_dir, syncfs, unpack_blob
from nodeagent.core.clock import Clock
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

TOUCH_WRITE_S = 60.0  # how far last_used on disk may lag the store's (touch)
_HOLDER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def validate_holder(holder: str) -> str:
    """A lease holder becomes a file name: letters, digits, `_`, `.`, `-`, at most 200."""
    if not isinstance(holder, str) or not _HOLDER_RE.fullmatch(holder):
        raise ValueError(f"lease holder {holder!r}: must match {_HOLDER_RE.pattern}")
    return holder


def atomic_write(path: str, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename over `path`, fsync the directory."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def replace_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """Temp file and rename, without fsync: a reader sees all of the file or none of it, but a
    machine crash may lose it. For files rewritten before every container start (config.json,
    /etc/hosts...) or naming processes (the sandbox record), which a crash makes moot anyway;
    an agent killed with SIGKILL loses nothing (the page cache stays). The fsyncs of a durable
    write cost 5-12 ms (p50-p90) on this busy disk."""
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), "wb") as f:
            if mode & 0o077:
                os.fchmod(f.fileno(), mode)  # past the umask
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class Prepared:
    """A fetched image whose layers are all in the store, not yet recorded."""

    record: ImageRecord  # names, first_seen and last_used are set by commit()
    new_layers: int  # layers unpacked now (the others were there already)


class ImageStore:
    def __init__(self, root: str, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        self.blobs = os.path.join(root, "blobs")
        self.layers = os.path.join(root, "layers")
        self.records_dir = os.path.join(root, "records")
        self.leases_dir = os.path.join(root, "leases")
        self.tmp = os.path.join(root, "tmp")
        self._records: dict[str, ImageRecord] = {}
        self._used_on_disk: dict[str, float] = {}  # image id -> last_used of its record on disk
        self._leases: dict[str, str] = {}

    # ---- opening ----
    def open(self) -> list[str]:
        """Create the directories, empty tmp/, load records and leases; the problems found."""
        for d in (self.root, self.blobs, self.layers, self.records_dir, self.leases_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.blobs, "sha256"), mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.layers, "sha256"), mode=0o700, exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp, mode=0o700)
        problems: list[str] = []
        self._records.clear()
        for name in sorted(os.listdir(self.records_dir)):
            path = os.path.join(self.records_dir, name)
            if name.startswith(".") and name.endswith(".tmp"):
                os.unlink(path)  # a write that never reached its rename
                continue
            try:
                with open(path, "rb") as f:
                    record = record_from_json(f.read())
                missing = [layer.diff_id for layer in record.layers if not os.path.isdir(self.layer_dir(layer.diff_id))]
                if missing:
                    raise ValueError(f"layer directories missing: {', '.join(missing)}")
            except (OSError, ValueError, KeyError, TypeError) as e:
                problems.append(f"image record {name}: {e}; removed")
                os.unlink(path)
                continue
            self._records[record.id] = record
            self._used_on_disk[record.id] = record.last_used
        self._leases.clear()
        for name in sorted(os.listdir(self.leases_dir)):
            path = os.path.join(self.leases_dir, name)
            if name.endswith(".tmp"):
                os.unlink(path)  # a write that never reached its rename
                continue
            try:
                with open(path, "rb") as f:
                    data = json.loads(f.read())
                self._leases[validate_holder(data["holder"])] = str(data["image"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                problems.append(f"lease {name}: {e}; removed")
                os.unlink(path)
        return problems

    # ---- reading ----
    def records(self) -> list[ImageRecord]:
        return list(self._records.values())

    def get(self, image_id: str) -> ImageRecord | None:
        return self._records.get(image_id)

    def find(self, ref: ImageRef) -> ImageRecord | None:
        """The image a reference names: by digest (repo digest, manifest or config digest) when it
        has one, else by its tag."""
        for record in self._records.values():
            if ref.digest is not None:
                if ref.with_digest(ref.digest) in record.repo_digests or ref.digest == record.manifest_digest:
                    return record
            elif ref.tagged in record.repo_tags:
                return record
        return None

    def lookup(self, text: str, ref: ImageRef | None) -> ImageRecord:
        """For the CLI and API: a reference, a full id (`sha256:...`) or a unique id prefix (>= 4)."""
        if ref is not None:
            found = self.find(ref)
            if found is not None:
                return found
        hexpart = text.removeprefix("sha256:")
        if len(hexpart) >= 4 and all(c in "0123456789abcdef" for c in hexpart):
            matches = [r for r in self._records.values() if r.id.removeprefix("sha256:").startswith(hexpart)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise NotPresent(f"image id prefix {text!r} is ambiguous ({len(matches)} images)")
        raise NotPresent(f"no image {text!r} on this node")

    def layer_dir(self, diff_id: str) -> str:
        return blob_path(self.layers, diff_id)

    def lowerdirs(self, record: ImageRecord) -> list[str]:
        """The layer directories as overlayfs wants them in `lowerdir=`: the top layer first."""
        return [self.layer_dir(layer.diff_id) for layer in reversed(record.layers)]

    def leases(self) -> dict[str, str]:
        """holder -> image id."""
        return dict(self._leases)

    def holders(self, image_id: str) -> list[str]:
        return sorted(h for h, i in self._leases.items() if i == image_id)

    def in_use(self) -> set[str]:
        return set(self._leases.values())

    # ---- fetching into the store ----
    def new_pull_dir(self) -> str:
        """A fresh directory under tmp/ for one pull's OCI layout (its blobs go to blobs/)."""
        path = os.path.join(self.tmp, f"pull-{secrets.token_hex(6)}")
        os.mkdir(path, 0o700)
        return path

    def discard(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def _verified_blob(self, digest: str, size: int | None, what: str) -> bytes:
        path = blob_path(self.blobs, digest)
        try:
            return read_verified(path, digest, size)
        except FileNotFoundError:
            raise PullFailed(f"{what} {digest} is missing from the blob store") from None
        except DigestMismatch:
            os.unlink(path)  # a damaged blob would be reused by every later pull: drop it
            raise

    def prepare_layout(self, layout: str, *, space: SpaceCheck, platform: tuple[str, str]) -> Prepared:
        """Check the fetched OCI layout `layout` (one image; blobs in blobs/): manifest, config and
        every layer against their digests, unpacking the layers not yet in the store. Blocking and
        slow; safe to run beside other pulls (layers are renamed into place whole)."""
        try:
            with open(os.path.join(layout, "index.json"), "rb") as f:
                entries = parse_index(f.read())
        except FileNotFoundError:
            raise PullFailed("the fetched layout has no index.json") from None
        if len(entries) != 1:
            raise PullFailed(f"the fetched layout lists {len(entries)} manifests, expected one")
        entry = entries[0]
        manifest_data = self._verified_blob(entry.digest, entry.size, "manifest")
        if entry.media_type in INDEX_TYPES:
            raise PullFailed("the fetched layout holds an image index, not one image")
        config_desc, layer_descs = parse_manifest(manifest_data, f"manifest {entry.digest}")
        config_data = self._verified_blob(config_desc.digest, config_desc.size, "image config")
        config, diff_ids, os_name, arch = parse_config(config_data, len(layer_descs),
                                                       f"image config {config_desc.digest}")
        if os_name and os_name != platform[0]:
            raise PullFailed(f"image is for {os_name}/{arch}, this node is {platform[0]}/{platform[1]}")
        layers: list[Layer] = []
        new = 0
        for desc, diff_id in zip(layer_descs, diff_ids, strict=True):
            usage, made = self.ensure_layer(desc.digest, desc.media_type, desc.size, diff_id, space)
            new += made
            layers.append(Layer(desc.digest, desc.media_type, desc.size, diff_id, usage))
        record = ImageRecord(config_desc.digest, entry.digest, entry.size, config_desc.size, tuple(layers), config,
                             os=os_name or platform[0], architecture=arch)
        return Prepared(record, new)

    def commit(self, prepared: Prepared, *, tags: Iterable[str], digests: Iterable[str]) -> ImageRecord:
        """Write the record of a prepared image (merged with the record of the same id, if any):
        from here on the image exists. Quick (one atomic write)."""
        now = self.clock.wall()
        record = prepared.record
        old = self._records.get(record.id)
        record = replace(record, first_seen=old.first_seen if old else now, last_used=now)
        if old is not None:
            record = replace(record, repo_tags=old.repo_tags, repo_digests=old.repo_digests)
        record = record.with_names(list(tags), list(digests))
        self._move_tags(record)
        self._write(record)
        return record

    def ensure_layer(self, digest: str, media_type: str, size: int, diff_id: str, space: SpaceCheck) -> tuple[int, int]:
        """(usage, 1 if unpacked now else 0) of the layer directory for `diff_id`."""
        final = self.layer_dir(diff_id)
        if os.path.isdir(final):
            return self._known_usage(diff_id, final), 0
        work = os.path.join(self.tmp, f"layer-{secrets.token_hex(6)}")
        os.mkdir(work, 0o700)
        try:
            stats = unpack_blob(blob_path(self.blobs, digest), media_type, digest, size, diff_id, work, space)
            syncfs(work)
            try:
                os.rename(work, final)
            except OSError:
                if not os.path.isdir(final):
                    raise
                shutil.rmtree(work, ignore_errors=True)  # another pull unpacked it meanwhile
            fsync_dir(os.path.dirname(final))
        except FileNotFoundError as e:
            shutil.rmtree(work, ignore_errors=True)
            if e.filename == blob_path(self.blobs, digest):
                raise PullFailed(f"layer {digest} is missing from the blob store") from None
            raise
        except (DigestMismatch, BadLayer):
            shutil.rmtree(work, ignore_errors=True)
            # a damaged blob would be reused by every later pull, a hostile one is of no use: drop it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(blob_path(self.blobs, digest))
            raise
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        log.info("image_layer_unpacked", diff_id=diff_id, files=stats.files, bytes=stats.bytes,
                 whiteouts=stats.whiteouts, opaque_dirs=stats.opaque_dirs)
        return disk_usage(final), 1

    def _known_usage(self, diff_id: str, path: str) -> int:
        for record in self._records.values():
            for layer in record.layers:
                if layer.diff_id == diff_id:
                    return layer.usage
        return disk_usage(path)

    def _move_tags(self, record: ImageRecord) -> None:
        """A tag names one image: the image that had it loses it (and may become unused)."""
        for other in list(self._records.values()):
            if other.id == record.id:
                continue
            kept = tuple(t for t in other.repo_tags if t not in record.repo_tags)
            if kept != other.repo_tags:
                self._write(replace(other, repo_tags=kept))

    def _write(self, record: ImageRecord) -> None:
        atomic_write(os.path.join(self.records_dir, record.id.replace(":", "-") + ".json"), record.to_json())
        self._records[record.id] = record
        self._used_on_disk[record.id] = record.last_used

    def tag(self, record: ImageRecord, tags: Iterable[str] = (), digests: Iterable[str] = ()) -> ImageRecord:
        updated = record.with_names(list(tags), list(digests))
        if updated != record:
            self._move_tags(updated)
            self._write(updated)
        return updated

    def touch(self, image_id: str) -> ImageRecord:
        """last_used = now; the record is rewritten (durably) only once the one on disk is
        TOUCH_WRITE_S older: GC orders by it and counts its ages in minutes (imageMinimumGCAge
        2m), so a burst of starts from one image writes its record once, not once per container."""
        record = self._records[image_id]
        updated = replace(record, last_used=self.clock.wall())
        if updated.last_used - self._used_on_disk.get(image_id, 0.0) >= TOUCH_WRITE_S:
            self._write(updated)
        else:
            self._records[image_id] = updated
        return updated

    # ---- leases ----
    def lease(self, holder: str, image_id: str) -> ImageRecord:
        """Record that `holder` (a container) uses the image, in a file that survives a SIGKILL
        of the agent but is not fsynced: the container it names does not survive a machine crash
        either, and after one the restored pod leases again before it starts. The four fsyncs of a
        durable lease and record, one lease after another behind the manager's lock, held the
        starts of a 100-pod burst 1.9 s at p50."""
        validate_holder(holder)
        if image_id not in self._records:
            raise NotPresent(f"no image {image_id} on this node")
        path = os.path.join(self.leases_dir, f"{holder}.json")
        replace_file(path, json.dumps({"holder": holder, "image": image_id, "since": self.clock.wall()}).encode())
        self._leases[holder] = image_id
        return self.touch(image_id)

    def release(self, holder: str) -> bool:
        validate_holder(holder)
        if self._leases.pop(holder, None) is None:
            return False
        try:
            os.unlink(os.path.join(self.leases_dir, f"{holder}.json"))
        except FileNotFoundError:
            pass
        fsync_dir(self.leases_dir)
        return True

    # ---- removing ----
    def remove(self, image_id: str) -> ImageRecord:
        """Forget the image (its record); InUse while a lease names it. The blobs and layers go at
        the next sweep()."""
        record = self._records.get(image_id)
        if record is None:
            raise NotPresent(f"no image {image_id} on this node")
        holders = self.holders(image_id)
        if holders:
            raise InUse(record.names[0] if record.names else image_id, holders)
        os.unlink(os.path.join(self.records_dir, image_id.replace(":", "-") + ".json"))
        fsync_dir(self.records_dir)
        del self._records[image_id]
        return record

    def sweep(self, keys: Iterable[str] | None = None) -> int:
        """Remove blobs and layer directories no record names; the bytes freed (st_blocks).

        With `keys` (`blob:<digest>` / `layer:<diff_id>`, e.g. the items of removed images) only
        those; without, everything unnamed, which is only safe while no pull is in flight (a
        pull's blobs have no record yet)."""
        wanted: set[str] = set()
        for record in list(self._records.values()):
            wanted.update(record.items())
        if keys is None:
            candidates = []
            for kind, base in (("blob", self.blobs), ("layer", self.layers)):
                for algorithm in os.listdir(base):
                    candidates += [f"{kind}:{algorithm}:{name}" for name in os.listdir(os.path.join(base, algorithm))]
        else:
            candidates = list(keys)
        freed = 0
        for key in candidates:
            if key in wanted:
                continue
            kind, _, digest = key.partition(":")
            try:
                path = blob_path(self.blobs if kind == "blob" else self.layers, digest)
            except FieldError:
                continue  # a stray file name that is no digest: not ours to judge
            freed += _remove_path(path)
        return freed

    def fs_stats(self) -> tuple[int, int]:
        """(capacity, available) bytes of the filesystem holding the store."""
        st = os.statvfs(self.root)
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _remove_path(path: str) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if stat.S_ISDIR(st.st_mode):
        used = disk_usage(path)
        shutil.rmtree(path, ignore_errors=True)
        return used
    os.unlink(path)
    return st.st_blocks * 512


__all__ = ["ImageStore", "Prepared", "atomic_write", "validate_holder"]
