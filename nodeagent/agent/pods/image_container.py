"""One container of a pod run from its image by the OCI runtime (issue 16), as its ContainerWorker
sees it: a `prepare` step awaited before every start, and a Spawner.

Before the first start (`prepare`, on the loop; every blocking part on a thread):
  1. Waiting ContainerCreating, then the image ensured per imagePullPolicy (ImageManager.ensure,
     with the credentials of the pod's imagePullSecrets read through `objects`,
     which records the Pulling/Pulled/Failed/BackOff events). An ImageError is the container's
     Waiting state (ErrImagePull, ImagePullBackOff, InvalidImageName, ErrImageNeverPull) and the
     step tries again as the kubelet's pod worker does: soon after a fresh ErrImagePull (the
     next attempt then reads ImagePullBackOff while the pull back-off runs), then once the
     back-off is over.
  2. A lease on the image (holder `<pod uid>-<container>`), so image GC keeps it while the
     container exists.
  3. The bundle (OciRuntime.prepare): stale runtime state deleted, a fresh overlay rootfs over a
     new writable layer, /etc/hosts, /etc/hostname and /etc/resolv.conf, config.json from the
     plan (argv with the image's Entrypoint/Cmd, env with the image's, workingDir, user, the
     container's cgroup with the plan's limits, its oom_score_adj from the QoS class). A
     FieldError (an image user that does not exist, nothing to run) is Waiting
     CreateContainerConfigError with an event Failed; an OSError (a mount) is Waiting
     CreateContainerError; both are tried again with the kubelet's 10 s doubling back-off.
     The pod's volumes are made first (volume_setup.py; their ConfigMaps and Secrets read on the
     loop through `objects`, the agent's cluster client) and bound at their mountPaths: a volume
     that cannot be made is CreateContainerError (an OSError) or CreateContainerConfigError (a
     missing ConfigMap/Secret, a subPath leaving its volume), named in the message.
Before a restart only step 3 runs again: a restarted container starts from its image.

The spawner (OciRuntime.monitor_spawner) starts `runc run` in the runtime's cgroup
(layout.RUNTIME_PATH); the worker reads Running only once the container's own process is in
`<container cgroup>/oci`.
`cleanup` (the pod's removal, off the loop): runc delete, unmount, the bundle directory removed;
`release` gives the image's lease back.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from nodeagent.agent.cgroups.common import read_pids
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.cgroups.layout import RUNTIME_PATH
from nodeagent.agent.images import errors as image_errors
from nodeagent.agent.images.backoff import backoff_delay, backoff_key
from nodeagent.agent.images.credentials import Credential, pull_secret_keyring
from nodeagent.agent.images.errors import ImageError
from nodeagent.agent.images.listing import image_id
from nodeagent.agent.images.manager import ImageManager, PodRef
from nodeagent.agent.images.records import ImageRecord
from nodeagent.agent.images.store import replace_file
from nodeagent.agent.pods.plan import ContainerPlan, PodPlan
from nodeagent.agent.pods.volume_files import VolumeSources
from nodeagent.agent.pods.volume_setup import ObjectGetter, PodVolumeHost, fetch_sources
from nodeagent.agent.runtime.oci.bundle import ContainerBundle, Mount, bind, container_bundle, hosts_file
from nodeagent.agent.runtime.oci.runtime import OCI_CGROUP, BundleDirs, OciRuntime, cgroups_path, container_id
from nodeagent.agent.runtime.oci.sandbox import Sandbox
from nodeagent.agent.runtime.state import REASON_CREATING, Waiting
from nodeagent.agent.runtime.supervisor import Spawner
from nodeagent.core.errors import FieldError

log = structlog.get_logger(__name__)

REASON_CONFIG_ERROR = "CreateContainerConfigError"
REASON_CREATE_ERROR = "CreateContainerError"
FIRST_RETRY_S = 1.0  # after a fresh ErrImagePull: the next attempt shows ImagePullBackOff
MIN_RETRY_S = 1.0
MAX_HOSTNAME = 63
HOST_RESOLV_CONF = "/etc/resolv.conf"
T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
OnEvent = Callable[[str, str], None]  # (reason, message) of a Warning event about the container


async def off_loop(fn: Callable[[], T]) -> T:
    """fn() on a thread; a cancel waits for it to finish (a mount half done is never left behind
    unseen by the cleanup that follows the cancel), then propagates."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.gather(fut, return_exceptions=True)
        raise


def pod_hostname(pod_name: str) -> str:
    """The container's hostname: the pod's name, cut to 63 characters as the kubelet does."""
    return pod_name[:MAX_HOSTNAME].rstrip("-.") or "pod"


def etc_mounts(etc_dir: str, hostname: str, resolv_conf: str = HOST_RESOLV_CONF) -> tuple[Mount, ...]:
    """/etc/hosts, /etc/hostname and /etc/resolv.conf written under `etc_dir` (the host's
    resolv.conf: the pod shares the node's network, dnsPolicy Default) and bind-mounted read-only.
    Written again before every start, so not fsynced (six fsyncs were 23 ms of a start at load 9)."""
    os.makedirs(etc_dir, mode=0o755, exist_ok=True)
    try:
        with open(resolv_conf, "rb") as f:
            resolv = f.read(1 << 16)
    except OSError:
        resolv = b""
    files = {"hosts": hosts_file(hostname).encode(), "hostname": f"{hostname}\n".encode(), "resolv.conf": resolv}
    mounts = []
    for name, data in files.items():
        path = os.path.join(etc_dir, name)
        replace_file(path, data, 0o644)
        mounts.append(bind(path, f"/etc/{name}", read_only=True))
    return tuple(mounts)


class ImageContainer:
    def __init__(self, plan: PodPlan, c: ContainerPlan, *, images: ImageManager, oci: OciRuntime,
                 driver: CgroupDriver, sandbox: Sandbox, sleep: Sleep = asyncio.sleep,
                 on_event: OnEvent | None = None, resolv_conf: str = HOST_RESOLV_CONF,
                 volumes: PodVolumeHost | None = None, objects: ObjectGetter | None = None) -> None:
        self.plan = plan
        self.c = c
        self.images = images
        self.oci = oci
        self.driver = driver
        self.sandbox = sandbox
        self._sleep = sleep
        self._on_event = on_event
        self._resolv_conf = resolv_conf
        self.volumes = volumes  # the pod's volumes, shared by its containers (volume_setup.py)
        self._objects = objects  # where the volumes' ConfigMaps and Secrets are read (None: nowhere)
        self.cid = container_id(plan.uid, c.name)
        self.holder = self.cid  # a lease holder is a file name: no '/'
        self.dirs = BundleDirs(os.path.join(plan.log_dir, "oci", c.name))
        self.record: ImageRecord | None = None
        self.bundle: ContainerBundle | None = None
        self._log = log.bind(pod=plan.pod.key, container=c.name)

    @property
    def image(self) -> str:
        return self.c.spec.image or ""

    @property
    def image_id(self) -> str:
        """The container's imageID (listing.image_id) once its image is ensured, else ""."""
        return image_id(self.record, self.image) if self.record is not None else ""

    @property
    def cgroup(self) -> str:
        """The runtime's child of the container cgroup, which holds the container's processes."""
        return f"{self.c.cgroup_path}/{OCI_CGROUP}"

    def spawner(self) -> Spawner:
        return self.oci.monitor_spawner(self.cid, self.dirs, lambda: self.driver.procs_files(RUNTIME_PATH),
                                        self._container_pids)

    def _container_pids(self) -> list[int]:
        """The processes in the runtime's child cgroup, read from one cgroup.procs file: the runtime
        puts its init in every hierarchy before the init goes on, let alone execs the command
        (walking every hierarchy, as driver.pids does, cost 16 ms of CPU per start at 5 ms polls)."""
        files = self.driver.procs_files(self.cgroup)
        return read_pids(files[0]) if files else []

    # ---- prepare: the image, then the bundle ----
    async def prepare(self, waiting: Callable[[Waiting], None]) -> None:
        """Returns once the bundle is ready to run (see the module); loops on failures, with back-off."""
        failures = 0
        if self.record is None:
            waiting(Waiting(REASON_CREATING))
        while True:
            try:
                if self.record is None:
                    self.record = await self._ensure()
                sources = VolumeSources()
                if self.volumes is not None and self.volumes.needs_objects:
                    sources = await fetch_sources(self.volumes.volumes, self.plan.pod.metadata.namespace,
                                                  self._objects)
                await off_loop(functools.partial(self._prepare_bundle, sources))
                return
            except ImageError as e:
                waiting(Waiting(e.reason, e.message))
                delay = self._pull_retry(e)
                self._log.info("image_container_waiting", reason=e.reason, retry_in=delay, error=e.message)
            except (FieldError, OSError, ValueError, LookupError) as e:
                failures += 1
                reason = REASON_CONFIG_ERROR if isinstance(e, ValueError) else REASON_CREATE_ERROR
                waiting(Waiting(reason, str(e)))
                if self._on_event is not None:
                    self._on_event("Failed", f"Error: {e}")
                delay = backoff_delay(failures)
                self._log.warning("image_container_create_failed", reason=reason, retry_in=delay, error=str(e))
            await self._sleep(delay)

    async def _ensure(self) -> ImageRecord:
        meta = self.plan.pod.metadata
        record = await self.images.ensure(self.image, self.c.spec.image_pull_policy,
                                          PodRef(meta.namespace, meta.name, meta.uid), field_path="image",
                                          pull_secrets=await self._pull_secrets())
        return await self.images.lease(self.holder, record.id)

    async def _pull_secrets(self) -> list[dict[str, Credential]]:
        """The keyrings of the pod's imagePullSecrets, read through the cluster client (the
        kubelet's getPullSecretsForPod): an empty name is skipped; one that cannot be read, or
        whose data does not parse, is left out with a FailedToRetrieveImagePullSecret event, and the
        pull goes on with the others (it may then fail with the registry's 401)."""
        names = [r.name for r in self.plan.pod.spec.image_pull_secrets if r.name]
        if not names:
            return []
        keyrings: list[dict[str, Credential]] = []
        failed: list[str] = []
        namespace = self.plan.pod.metadata.namespace
        for name in names:
            try:
                secret = await self._objects("secrets", namespace, name) if self._objects is not None else None
                if secret is None:
                    raise LookupError(f'secret "{name}" not found')
                keyrings.append(pull_secret_keyring(secret))
            except (OSError, LookupError, ValueError) as e:
                self._log.info("image_pull_secret_unavailable", secret=name, error=str(e))
                failed.append(name)
        if failed and self._on_event is not None:
            self._on_event("FailedToRetrieveImagePullSecret",
                           f"Unable to retrieve some image pull secrets ({', '.join(failed)}); attempting to pull "
                           f"the image may not succeed.")
        return keyrings

    def _pull_retry(self, e: ImageError) -> float:
        if e.reason == image_errors.ERR_IMAGE_PULL:
            return FIRST_RETRY_S
        remaining = self.images.backoff.remaining(backoff_key(self.plan.uid, self.image))
        if e.reason == image_errors.IMAGE_PULL_BACKOFF:
            return max(MIN_RETRY_S, remaining)
        return max(MIN_RETRY_S, remaining, backoff_delay(1))  # a bad name or Never: the kubelet's resync

    def make_bundle(self, passwd: str, group: str, sandbox_pid: int | None) -> ContainerBundle:
        """The container's bundle from its plan and its image (FieldError: CreateContainerConfigError)."""
        assert self.record is not None
        c, pod = self.c, self.plan.pod
        security = pod.spec.security_context
        hostname = pod_hostname(pod.metadata.name)
        mounts = etc_mounts(os.path.join(self.dirs.root, "etc"), hostname, self._resolv_conf)
        if self.volumes is not None:
            mounts += self.volumes.mounts(c.spec)
        return container_bundle(
            command=c.spec.command, args=c.spec.args, env=c.env, working_dir=c.spec.working_dir,
            run_as_user=security.run_as_user if security else None,
            run_as_group=security.run_as_group if security else None,
            image=self.record.config, passwd=passwd, group=group, hostname=hostname,
            cgroups_path=cgroups_path(self.driver.root, c.cgroup_path), resources=c.cgroup_spec,
            oom_score_adj=c.config.oom_score_adj, sandbox_pid=sandbox_pid, mounts=mounts, terminal=c.spec.tty)

    def _prepare_bundle(self, sources: VolumeSources | None = None) -> None:
        assert self.record is not None
        self.oci.delete(self.cid)  # what a killed monitor left: runc refuses an ID it still knows
        if self.volumes is not None:
            self.volumes.ensure(sources)
        self.bundle = self.oci.prepare(self.dirs, self.images.lowerdirs(self.record), self.make_bundle, self.sandbox)

    # ---- removal ----
    def cleanup(self) -> None:
        """runc delete, unmount, the bundle's directory removed (blocking: run it off the loop)."""
        self.oci.cleanup(self.cid, self.dirs)
        shutil.rmtree(self.dirs.root, ignore_errors=True)

    async def release(self) -> None:
        try:
            await self.images.release(self.holder)
        except (OSError, ValueError) as e:
            self._log.warning("image_lease_release_failed", error=str(e))
