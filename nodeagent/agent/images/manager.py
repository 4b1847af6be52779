"""The ImageManager: what the rest of the agent calls to have images, and the executor of image GC.

    ensure(image, policy, pod)    a container is about to start: parse, decide by pull policy, pull
                                  with back-off, record Pulling/Pulled/Failed/BackOff events; an
                                  ImageError carries the container's waiting reason (errors.py)
    pull(image) / import_image()  the CLI's and API's verbs
    lease(holder, id) / release   a container's hold on its image (GC and rm never take it away)
    remove(name)                  refused while leased
    garbage_collect()             the periodic pass (every GC_PERIOD_S, the daemon's loop calls it)
    reclaim(bytes_needed)         the eviction manager's call on imagefs pressure, before it evicts
    node_images()                 status.images for the Node

Store changes are serialised by one asyncio lock and run in threads (they fsync); the slow part of
a pull (skopeo, unpacking) runs outside the lock, so a container start never waits for someone
else's download. Two pulls of the same reference share one download.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from nodeagent.agent.config.settings import Config, RegistryConfig
from nodeagent.agent.config.thresholds import Threshold
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.backoff import PullBackoff, backoff_key
from nodeagent.agent.images.credentials import Access, Credential, accesses_for
from nodeagent.agent.images.gc import GC_PERIOD_S, GCPlan, GCPolicy, ImageUsage, plan_gc, plan_reclaim
from nodeagent.agent.images.listing import node_images
from nodeagent.agent.images.policy import Decision, decide, resolve_pull_policy
from nodeagent.agent.images.records import INDEX_TYPES, ImageRecord, parse_index, parse_manifest, select_platform
from nodeagent.agent.images.reference import ImageRef, parse_reference
from nodeagent.agent.images.skopeo import Fetcher, Skopeo
from nodeagent.agent.images.store import ImageStore, Prepared
from nodeagent.agent.images.unpack import statvfs_space
from nodeagent.core.clock import Clock
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

INSPECT_TIMEOUT_S = 60.0
PROGRESS_POLL_S = 1.0
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
         "riscv64": "riscv64", "i686": "386"}


def node_platform() -> tuple[str, str]:
    """(os, architecture) in OCI terms for this machine."""
    machine = platform.machine()
    return "linux", _ARCH.get(machine, machine)


@dataclass(frozen=True)
class PodRef:
    """The pod an image is ensured for: events name it, the back-off is keyed by its uid."""

    namespace: str
    name: str
    uid: str


@dataclass
class Progress:
    """One pull in flight, as GET /api/v1/images/pulls shows it."""

    image: str
    started: float  # monotonic
    total: int | None = None  # bytes of the blobs to fetch, when the manifest was read first
    done: int = 0
    phase: str = "resolving"  # resolving, downloading, unpacking
    layout: str | None = None
    layer_digests: tuple[str, ...] = ()
    pid: int | None = None

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"image": self.image, "phase": self.phase, "bytesDone": self.done, "bytesTotal": self.total,
                "seconds": round(now - self.started, 3)}


@dataclass
class GCResult:
    removed: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    goal: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"removed": self.removed, "bytesFreed": self.bytes_freed, "bytesToFree": self.goal,
                "reason": self.reason}


class ImageManager:
    def __init__(self, store: ImageStore, fetcher: Fetcher, events: EventRecorder, clock: Clock, *,
                 registries: Mapping[str, RegistryConfig] | None = None, gc_policy: GCPolicy | None = None,
                 reserve_bytes: int = 0, progress_timeout: float = 300.0, inspect_timeout: float = INSPECT_TIMEOUT_S,
                 platform: tuple[str, str] | None = None, reserve_threshold: Threshold | None = None) -> None:
        """No I/O here: `start()` opens the store. `reserve_threshold` (the imagefs.available hard
        threshold) sets `reserve_bytes` from imagefs' capacity once `start()` has read it."""
        self.store = store
        self.fetcher = fetcher
        self.events = events
        self.clock = clock
        self.registries = dict(registries or {})
        self.gc_policy = gc_policy or GCPolicy()
        self.reserve_bytes = reserve_bytes
        self.reserve_threshold = reserve_threshold
        self._capacity: int | None = None  # imagefs bytes, read by start()
        self.progress_timeout = progress_timeout
        self.inspect_timeout = inspect_timeout
        self.platform = platform or node_platform()
        self.backoff = PullBackoff(clock)
        self._last_error: dict[str, E.ImageError] = {}
        self._lock = asyncio.Lock()
        # leases and releases (one per container start and removal): a thread of their own, so a
        # burst of starts does not queue each one behind the bundles being made on the default pool
        self._leases_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-leases")
        self._inflight: dict[tuple[str, tuple[Credential | None, ...]], asyncio.Task[ImageRecord]] = {}
        self._progress: dict[str, Progress] = {}
        self._sweep_pending = False

    # ---- start ----
    async def start(self) -> list[str]:
        """Open the store (empties tmp/, drops broken records) and sweep what no record names."""
        problems = await asyncio.to_thread(self.store.open)
        for problem in problems:
            log.warning("image_store_problem", problem=problem)
        freed = await asyncio.to_thread(self.store.sweep)
        self._capacity, _ = await asyncio.to_thread(self.store.fs_stats)
        self._apply_reserve()
        log.info("image_store_opened", root=self.store.root, images=len(self.store.records()), swept_bytes=freed,
                 reserve_bytes=self.reserve_bytes)
        return problems

    def _apply_reserve(self) -> None:
        if self.reserve_threshold is not None and self._capacity is not None:
            self.reserve_bytes = self.reserve_threshold.value_for(self._capacity)

    def reconfigure(self, config: Config) -> None:
        """A reload: registries, the GC policy, the progress timeout and the reserve apply to the
        next pull or pass (the store's place, imagefsPath, takes a restart)."""
        self.registries = dict(config.image_registries)
        self.gc_policy = gc_policy_of(config)
        self.progress_timeout = config.image_pull_progress_timeout
        self.reserve_threshold = reserve_threshold_of(config)
        if self.reserve_threshold is None:
            self.reserve_bytes = 0
        self._apply_reserve()

    # ---- the pod worker's entry ----
    async def ensure(self, image: str, policy: str | None, pod: PodRef, *, field_path: str = "image",
                     pull_secrets: Sequence[Mapping[str, Credential]] = ()) -> ImageRecord:
        """The image for a container about to start, pulled if the policy says so.

        Raises ImageError: InvalidImageName, NeverPull, PullFailed (ErrImagePull), or BackOffError
        (ImagePullBackOff) while the back-off of an earlier failure runs. FieldError for a bad
        imagePullPolicy (admission should have refused it).
        """
        obj = dict(kind="Pod", namespace=pod.namespace, name=pod.name, uid=pod.uid)
        try:
            ref = parse_reference(image, field_path)
        except FieldError as e:
            err = E.InvalidImageName(E.invalid_name_message(image, e.message))
            self.events.record(E.EVENT_INSPECT_FAILED, err.message, **obj)
            raise err from None
        resolved = resolve_pull_policy(policy, ref)
        present = self.store.find(ref)
        decision = decide(resolved, present is not None)
        if decision is Decision.USE_PRESENT:
            assert present is not None
            self.events.record(E.EVENT_PULLED, E.present_message(image), type_="Normal", **obj)
            return present
        if decision is Decision.NEVER_PULL:
            err2 = E.NeverPull(E.never_pull_message(image))
            self.events.record(E.ERR_IMAGE_NEVER_PULL, err2.message, **obj)
            raise err2
        key = backoff_key(pod.uid, image)
        if self.backoff.in_backoff(key):
            last = self._last_error.get(key) or E.PullFailed("an earlier pull failed")
            self.events.record(E.EVENT_BACKOFF, E.backoff_message(image), type_="Normal", **obj)
            raise BackOffError(image, last)
        self.events.record("Pulling", f'Pulling image "{image}"', type_="Normal", **obj)
        waited = self.clock.now()
        try:
            record, seconds = await self._pull_shared(ref, pull_secrets)
        except E.ImageError as e:
            self.backoff.failed(key)
            self._last_error[key] = e
            self.events.record(E.EVENT_FAILED, E.failed_event_message(image, e), **obj)
            raise
        self.backoff.succeeded(key)
        self._last_error.pop(key, None)
        self.events.record(E.EVENT_PULLED, E.pulled_message(image, seconds, self.clock.now() - waited, record.size),
                           type_="Normal", **obj)
        return record

    # ---- CLI / API verbs ----
    async def pull(self, image: str, policy: str = "Always", *, field_path: str = "image") -> ImageRecord:
        """Pull for the CLI: errors raise (FieldError for a bad reference); events name the node."""
        ref = parse_reference(image, field_path)
        resolved = resolve_pull_policy(policy, ref, "policy")
        present = self.store.find(ref)
        if decide(resolved, present is not None) is Decision.USE_PRESENT and present is not None:
            return present
        if resolved == "Never":
            raise E.NeverPull(E.never_pull_message(image))
        node = dict(kind="Node", name=self.events.node_name)
        self.events.record("Pulling", f'Pulling image "{image}"', type_="Normal", **node)
        try:
            record, seconds = await self._pull_shared(ref, ())
        except E.ImageError as e:
            self.events.record(E.EVENT_FAILED, E.failed_event_message(image, e), **node)
            raise
        self.events.record(E.EVENT_PULLED, E.pulled_message(image, seconds, seconds, record.size), type_="Normal",
                           **node)
        return record

    async def import_image(self, path: str, fmt: str, tag: str | None = None,
                           ref_name: str | None = None) -> ImageRecord:
        """Import an OCI layout directory (`oci`) or a docker-archive tarball (`docker-archive`).

        `tag` names the image (a reference, normalized). `ref_name` picks the image of a layout
        that holds several (its `org.opencontainers.image.ref.name`), or of a multi-image archive.
        """
        if fmt not in ("oci", "docker-archive"):
            raise FieldError("format", f'Unsupported value: "{fmt}": supported values: "oci", "docker-archive"')
        if not os.path.isabs(path):
            raise FieldError("path", f"must be an absolute path on the node, got {path!r}")
        ref = parse_reference(tag, "tag") if tag else None
        if ref_name is not None and (not ref_name or any(c in ref_name for c in ":\0\n")):
            raise FieldError("ref", f"Invalid value: {ref_name!r}: a layout reference name has no ':'")
        source = f"{fmt}:{path}" + (f":{ref_name}" if ref_name else "")
        record, _ = await self._fetch_and_commit(source, None, ref, [ref.tagged] if ref and ref.tagged else [],
                                                 [], label=path, repo_digest_of_layout=fmt == "oci")
        log.info("image_imported", path=path, format=fmt, image=record.id, tags=list(record.repo_tags))
        return record

    def images(self) -> list[ImageRecord]:
        return sorted(self.store.records(), key=lambda r: (r.names[0] if r.names else r.id))

    def get(self, text: str) -> ImageRecord:
        try:
            ref: ImageRef | None = parse_reference(text)
        except FieldError:
            ref = None
        return self.store.lookup(text, ref)

    async def remove(self, text: str) -> ImageRecord:
        """Remove an image named by reference or id; InUse while a container holds it."""
        async with self._lock:
            record = self.get(text)
            await asyncio.to_thread(self.store.remove, record.id)
        freed = await asyncio.to_thread(self.store.sweep, list(record.items()))
        log.info("image_removed", image=record.id, names=list(record.names), bytes_freed=freed)
        return record

    # ---- leases ----
    async def lease(self, holder: str, image_id: str) -> ImageRecord:
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self._leases_io, self.store.lease, holder,
                                                                    image_id)

    async def release(self, holder: str) -> bool:
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self._leases_io, self.store.release, holder)

    def holders(self, image_id: str) -> list[str]:
        """Who holds a lease on the image."""
        return self.store.holders(image_id)

    def lowerdirs(self, record: ImageRecord) -> list[str]:
        return self.store.lowerdirs(record)

    # ---- GC ----
    def _usages(self) -> list[ImageUsage]:
        used = self.store.in_use()
        return [ImageUsage(r.id, r.items(), r.id in used, r.first_seen, r.last_used) for r in self.store.records()]

    async def _execute(self, plan: GCPlan) -> GCResult:
        """Remove the planned images (a lease taken meanwhile keeps its image) and their pieces."""
        result = GCResult(goal=plan.bytes_to_free, reason=plan.reason)
        keys: list[str] = []
        async with self._lock:
            for image_id in plan.remove:
                try:
                    record = await asyncio.to_thread(self.store.remove, image_id)
                except (E.InUse, E.NotPresent):
                    continue
                result.removed.append(image_id)
                keys += record.items()
        if keys:
            result.bytes_freed = await asyncio.to_thread(self.store.sweep, keys)
        return result

    async def garbage_collect(self) -> GCResult:
        """One periodic pass of the kubelet's image GC; a FreeDiskSpaceFailed event when it falls short."""
        capacity, available = await asyncio.to_thread(self.store.fs_stats)
        plan = plan_gc(self._usages(), capacity, available, self.clock.wall(), self.gc_policy)
        result = await self._execute(plan)
        if result.removed:
            log.info("image_gc", reason=result.reason, removed=result.removed, bytes_freed=result.bytes_freed,
                     bytes_to_free=result.goal)
        if result.goal and result.bytes_freed < result.goal:
            self.events.record("FreeDiskSpaceFailed",
                               f"Failed to garbage collect required amount of images. Attempted to free "
                               f"{result.goal} bytes, but only found {result.bytes_freed} bytes eligible to free.",
                               kind="Node", name=self.events.node_name)
        return result

    async def gc_loop(self, period: float = GC_PERIOD_S) -> None:
        """garbage_collect() every `period` (the kubelet's 5 min), for the daemon to run as a task;
        a failed pass is logged and the next one comes."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.garbage_collect()
            except OSError as e:
                log.warning("image_gc_failed", error=str(e))
            except Exception:  # one bad pass must not end image GC (the task is a forever one)
                log.exception("image_gc_failed")

    async def reclaim(self, bytes_needed: int) -> int:
        """Free at least `bytes_needed` on imagefs by removing unused images, least recently used
        first (the eviction manager's call before it evicts pods); the bytes freed."""
        plan = plan_reclaim(self._usages(), bytes_needed, self.clock.wall(), self.gc_policy)
        result = await self._execute(plan)
        log.info("image_reclaim", bytes_needed=bytes_needed, removed=result.removed, bytes_freed=result.bytes_freed)
        return result.bytes_freed

    # ---- reporting ----
    def node_images(self) -> list[dict[str, Any]]:
        return node_images(self.store.records())

    def progress(self) -> list[dict[str, Any]]:
        """Pulls in flight; bytesDone as the watcher last measured it (every PROGRESS_POLL_S)."""
        now = self.clock.now()
        return [p.to_dict(now) for p in self._progress.values()]

    # ---- pulling ----
    def _accesses(self, ref: ImageRef, secrets: Sequence[Mapping[str, Credential]]) -> list[Access]:
        try:
            return accesses_for(ref, self.registries, secrets)
        except OSError as e:
            raise E.Unauthorized(f"cannot read the password file for {ref.registry}: {e.strerror}") from None

    async def _pull_shared(self, ref: ImageRef,
                           secrets: Sequence[Mapping[str, Credential]]) -> tuple[ImageRecord, float]:
        """One download per reference and credentials at a time: a second caller with the same
        credentials awaits the first (one whose pull secrets differ pulls with its own)."""
        accesses = self._accesses(ref, secrets)
        key = (str(ref), tuple(a.credential for a in accesses))
        started = self.clock.now()
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._pull(ref, accesses))
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        record = await asyncio.shield(task)
        return record, self.clock.now() - started

    async def _inspect_first(self, ref: ImageRef, accesses: Sequence[Access]) -> tuple[bytes, Access]:
        """The reference's manifest with the first credential the registry accepts (the kubelet
        tries each matching credential in turn); the last refusal when none is accepted."""
        for i, access in enumerate(accesses):
            try:
                return await self.fetcher.inspect_raw(f"docker://{ref}", access, self.inspect_timeout), access
            except E.Unauthorized:
                if i == len(accesses) - 1:
                    raise
                log.info("image_pull_credential_refused", image=str(ref), registry=access.registry, tried=i + 1,
                         remaining=len(accesses) - i - 1)
        raise AssertionError("accesses_for never returns an empty list")

    async def _pull(self, ref: ImageRef, accesses: Sequence[Access]) -> ImageRecord:
        progress = Progress(str(ref), self.clock.now())
        token = f"pull-{id(progress)}"
        self._progress[token] = progress
        try:
            raw, access = await self._inspect_first(ref, accesses)
            listed = f"sha256:{hashlib.sha256(raw).hexdigest()}"
            digests = [ref.with_digest(listed)]
            manifest_digest = listed
            try:
                entries = parse_index(raw, f"index of {ref}") if _is_index(raw) else None
            except E.PullFailed:
                entries = None
            if entries is not None:
                manifest_digest = select_platform(entries, *self.platform).digest
                raw = await self.fetcher.inspect_raw(f"docker://{ref.with_digest(manifest_digest)}", access,
                                                     self.inspect_timeout)
                digests.append(ref.with_digest(manifest_digest))
            # the tag may already point at an image we have (Always on an unchanged tag): no download
            have = self.store.find(ImageRef(ref.registry, ref.repository, None, manifest_digest)) or \
                self.store.find(ImageRef(ref.registry, ref.repository, None, listed))
            if have is not None:
                async with self._lock:
                    have = await asyncio.to_thread(self.store.tag, have, [ref.tagged] if ref.tagged else [], digests)
                    return await asyncio.to_thread(self.store.touch, have.id)
            _, layers = parse_manifest(raw, f"manifest of {ref}")
            progress.total = sum(layer.size for layer in layers)
            progress.layer_digests = tuple(layer.digest for layer in layers)
            await self._make_room(2 * progress.total)  # the blobs, and unpacked layers at least as big
            source = f"docker://{ref.with_digest(manifest_digest)}"
            record, _ = await self._fetch_and_commit(source, access, ref, [ref.tagged] if ref.tagged else [], digests,
                                                     label=str(ref), progress=progress)
            return record
        finally:
            self._progress.pop(token, None)

    async def _make_room(self, blob_bytes: int) -> None:
        """Before downloading: `blob_bytes` must fit above the reserve, after reclaiming unused
        images if they do not (a layer that unpacks bigger still stops with NoSpace, cleanly)."""
        _, available = await asyncio.to_thread(self.store.fs_stats)
        short = blob_bytes + self.reserve_bytes - available
        if short > 0:
            await self.reclaim(short)
            _, available = await asyncio.to_thread(self.store.fs_stats)
            if blob_bytes + self.reserve_bytes > available:
                raise E.NoSpace(f"no space left on the image filesystem: the image needs {blob_bytes} bytes, "
                                f"{available} free, {self.reserve_bytes} kept in reserve")

    async def _fetch_and_commit(self, source: str, access: Access | None, ref: ImageRef | None, tags: list[str],
                                digests: list[str], *, label: str, progress: Progress | None = None,
                                repo_digest_of_layout: bool = False) -> tuple[ImageRecord, float]:
        started = self.clock.now()
        token = None
        if progress is None:
            progress = Progress(label, started)
            token = f"import-{id(progress)}"
            self._progress[token] = progress
        layout = await asyncio.to_thread(self.store.new_pull_dir)
        progress.layout = layout
        try:
            progress.phase = "downloading"
            await self._copy_watched(source, layout, access, progress)
            progress.phase = "unpacking"
            prepared = await self._prepare(layout)
            if repo_digest_of_layout and ref is not None:
                digests = [*digests, ref.with_digest(prepared.record.manifest_digest)]
            async with self._lock:
                record = await asyncio.to_thread(self.store.commit, prepared, tags=tags, digests=digests)
            log.info("image_pulled", source=source, image=record.id, size=record.size, new_layers=prepared.new_layers,
                     seconds=round(self.clock.now() - started, 3))
            return record, self.clock.now() - started
        finally:
            if token is not None:
                self._progress.pop(token, None)
            await asyncio.to_thread(self.store.discard, layout)

    async def _prepare(self, layout: str) -> Prepared:
        space = statvfs_space(self.store.root, self.reserve_bytes)
        return await asyncio.to_thread(self.store.prepare_layout, layout, space=space, platform=self.platform)

    async def _copy_watched(self, source: str, layout: str, access: Access | None, progress: Progress) -> None:
        """skopeo copy, killed when no byte arrived for progress_timeout seconds."""
        copy = asyncio.ensure_future(self.fetcher.copy(source, layout, self.store.blobs, access,
                                                       started=lambda pid: setattr(progress, "pid", pid)))
        last_done, last_change = -1, self.clock.now()
        try:
            while True:
                done, _ = await asyncio.wait({copy}, timeout=PROGRESS_POLL_S)
                if done:
                    copy.result()
                    return
                now_done = await asyncio.to_thread(_bytes_done, progress, self.store.blobs)
                progress.done = max(progress.done, now_done)
                if now_done != last_done:
                    last_done, last_change = now_done, self.clock.now()
                elif self.clock.now() - last_change >= self.progress_timeout:
                    copy.cancel()
                    try:
                        await copy
                    except asyncio.CancelledError:
                        pass
                    raise E.RegistryUnavailable(f"no progress for {self.progress_timeout:g}s pulling {source} "
                                                f"({now_done} bytes received)")
        finally:
            if not copy.done():
                copy.cancel()


def gc_policy_of(config: Config) -> GCPolicy:
    return GCPolicy(config.image_gc_high_threshold_percent, config.image_gc_low_threshold_percent,
                    config.image_minimum_gc_age, config.image_maximum_gc_age)


def reserve_threshold_of(config: Config) -> Threshold | None:
    """The imagefs.available hard threshold: every unpack keeps that much free."""
    return next((t for t in config.hard_thresholds if t.signal == "imagefs.available"), None)


def store_root(config: Config) -> str:
    return os.path.join(config.imagefs_path or config.nodefs_path or config.state_dir, "images")


def manager_from_config(config: Config, events: EventRecorder, clock: Clock) -> ImageManager:
    """The ImageManager a daemon runs: the store under `<imagefsPath>/images`, skopeo, the config's
    registries and GC keys, and the imagefs.available hard threshold kept free by every unpack.
    No I/O: `start()` opens the store and reads imagefs' capacity for the reserve."""
    store = ImageStore(store_root(config), clock)
    return ImageManager(store, Skopeo(workdir=store.tmp), events, clock, registries=config.image_registries,
                        gc_policy=gc_policy_of(config), reserve_threshold=reserve_threshold_of(config),
                        progress_timeout=config.image_pull_progress_timeout)


class BackOffError(E.ImageError):
    """A pull not tried because the back-off of the last failure runs (state ImagePullBackOff)."""

    reason = E.IMAGE_PULL_BACKOFF

    def __init__(self, image: str, last: E.ImageError) -> None:
        waiting = E.waiting_for(image, last, in_backoff=True)
        super().__init__(waiting.message)
        self.last = last


def _is_index(raw: bytes) -> bool:
    head = raw[:4096]
    return any(t.encode() in head for t in INDEX_TYPES) or b'"manifests"' in head


def _bytes_done(progress: Progress, blobs: str) -> int:
    """Bytes fetched so far: finished blobs of the manifest plus skopeo's files in progress."""
    total = 0
    for digest in progress.layer_digests:
        algorithm, _, hexpart = digest.partition(":")
        try:
            total += os.stat(os.path.join(blobs, algorithm, hexpart)).st_size
        except OSError:
            pass
    if progress.layout:
        try:
            with os.scandir(progress.layout) as it:
                for entry in it:
                    if entry.is_file(follow_symlinks=False) and entry.name not in ("index.json", "oci-layout"):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            pass
    return total


__all__ = ["BackOffError", "GCResult", "ImageManager", "PodRef", "Progress", "gc_policy_of", "manager_from_config",
           "node_platform", "reserve_threshold_of", "store_root"]
