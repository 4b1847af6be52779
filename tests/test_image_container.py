"""Image containers in the pod worker (pods/image_container.py), with fakes for the image store
and the OCI runtime: the Waiting states before the first start (ContainerCreating, ErrImagePull
then ImagePullBackOff with the pull back-off, CreateContainerConfigError / CreateContainerError
with the kubelet's back-off), the bundle made from the plan and the image, the lease, and what a
deletion removes. The "container" the fake runtime starts is a real short host process through
the spawn shim (so Running is honest as for host processes); the real runc path is
integration/images/test_image_pods.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeCgroupDriver

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.cgroups.layout import KUBEPODS, RUNTIME_PATH
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.manager import BackOffError, PodRef
from nodeagent.agent.images.records import ImageConfig, ImageRecord
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.image_container import FIRST_RETRY_S, ImageContainer
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.plan import plan_pod
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.oci.bundle import ContainerBundle
from nodeagent.agent.runtime.oci.runtime import BundleDirs
from nodeagent.agent.runtime.spawn import LaunchSpec, Spawned, spawn_ready
from nodeagent.core.clock import SystemClock
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity

GI = 1 << 30
IMAGE = "registry.test/app:1"
CONFIG = ImageConfig(entrypoint=("/bin/sh", "-c"), cmd=("echo from the image",), env=("PATH=/bin", "MODE=image"),
                     working_dir="/srv")
RECORD = ImageRecord(id="sha256:" + "a" * 64, manifest_digest="sha256:" + "b" * 64, manifest_size=1, config_size=1,
                     layers=(), config=CONFIG, repo_tags=(IMAGE,),
                     repo_digests=("registry.test/app@sha256:" + "b" * 64,))


class FakeBackoff:
    def __init__(self) -> None:
        self.left = 20.0

    def remaining(self, key: str) -> float:
        return self.left


class FakeImages:
    """ImageManager's surface for the worker: ensure answers from a script of results."""

    def __init__(self, results: Sequence[ImageRecord | E.ImageError] = (RECORD,)) -> None:
        self.results = list(results)
        self.ensured: list[tuple[str, str | None, PodRef]] = []
        self.secrets: list[Sequence[Any]] = []
        self.leases: dict[str, str] = {}
        self.released: list[str] = []
        self.backoff = FakeBackoff()

    async def ensure(self, image: str, policy: str | None, pod: PodRef, *, field_path: str = "image",
                     pull_secrets: Sequence[Any] = ()) -> ImageRecord:
        self.ensured.append((image, policy, pod))
        self.secrets.append(list(pull_secrets))
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, E.ImageError):
            raise result
        return result

    async def lease(self, holder: str, image_id: str) -> ImageRecord:
        self.leases[holder] = image_id
        return RECORD

    async def release(self, holder: str) -> bool:
        self.released.append(holder)
        return self.leases.pop(holder, None) is not None

    def lowerdirs(self, record: ImageRecord) -> list[str]:
        return ["/images/layer0"]


class FakeOci:
    """OciRuntime's surface: prepare makes the bundle (its errors scripted), the spawner runs the
    bundle's argv as a host process through the spawn shim (Running once it is in its cgroup)."""

    name = "fake"
    hands_over_console = False  # a tty run gets a terminal of the run's, as under runc

    def __init__(self, errors: Sequence[Exception] = ()) -> None:
        self.errors = list(errors)
        self.bundles: list[ContainerBundle] = []
        self.deleted: list[str] = []
        self.cleaned: list[str] = []
        self.state: set[str] = set()

    def delete(self, cid: str) -> None:
        self.deleted.append(cid)

    def has_state(self, cid: str) -> bool:
        return cid in self.state

    def prepare(self, dirs: BundleDirs, lowerdirs: Sequence[str], make_bundle: Any, sandbox: Any) -> ContainerBundle:
        if self.errors:
            raise self.errors.pop(0)
        bundle: ContainerBundle = make_bundle("", "", None)
        self.bundles.append(bundle)
        return bundle

    def monitor_spawner(self, cid: str, dirs: BundleDirs, monitor_procs: Any,
                        container_pids: Callable[[], list[int]]) -> Callable[..., Spawned]:
        def start(_launch: LaunchSpec, log_path: str, procs: Sequence[str], adj: int | None) -> Spawned:
            b = self.bundles[-1]
            env = dict(item.split("=", 1) for item in b.env)
            return spawn_ready(LaunchSpec(b.argv, env, "/"), log_path, procs, adj)
        return start

    def cleanup(self, cid: str, dirs: BundleDirs) -> None:
        self.cleaned.append(cid)


def pod_manifest(container: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": str(uuid.uuid4()), "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": IMAGE, **container}], "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 1}}


class Sleeps:
    """An injected sleep: records each wait and yields once (the retry loop moves on at once)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0.01)


# ---- the prepare step on its own ----


def image_container(tmp_path: Path, images: FakeImages, oci: FakeOci, sleep: Sleeps,
                    events: list[tuple[str, str]] | None = None, *, spec: dict[str, Any] | None = None,
                    objects: Any = None, **container: Any) -> ImageContainer:
    manifest = pod_manifest(container)
    manifest["spec"].update(spec or {})
    plan = plan_pod(parse_pod(manifest), state_dir=str(tmp_path), memory_capacity=4 * GI)
    return ImageContainer(plan, plan.containers[0], images=images, oci=oci, driver=FakeCgroupDriver(),  # type: ignore[arg-type]
                          sandbox=None, sleep=sleep, objects=objects,  # type: ignore[arg-type]
                          on_event=(lambda r, m: events.append((r, m))) if events is not None else None,
                          resolv_conf=str(tmp_path / "no-resolv.conf"))


async def test_pull_failures_read_err_image_pull_then_image_pull_backoff_and_wait_the_back_off(
        tmp_path: Path) -> None:
    images = FakeImages([E.PullFailed("manifest unknown"), BackOffError(IMAGE, E.PullFailed("manifest unknown")),
                         RECORD])
    oci, sleeps, seen = FakeOci(), Sleeps(), []
    ic = image_container(tmp_path, images, oci, sleeps, imagePullPolicy="Always")
    await ic.prepare(seen.append)
    assert [(w.reason, w.message.endswith("manifest unknown")) for w in seen] == [
        ("ContainerCreating", False), ("ErrImagePull", True), ("ImagePullBackOff", True)]
    # soon after a fresh failure (it then reads ImagePullBackOff), then the back-off's remainder
    assert sleeps.waits == [FIRST_RETRY_S, 20.0]
    assert [(i, p) for i, p, _ in images.ensured] == [(IMAGE, "Always")] * 3
    assert images.leases == {ic.holder: RECORD.id} and ic.holder == f"{ic.plan.uid}-main"
    assert len(oci.bundles) == 1 and oci.deleted == [ic.cid]  # stale runtime state first, then the bundle


async def test_image_pull_secrets_are_read_through_the_cluster_client(tmp_path: Path) -> None:
    """The kubelet's getPullSecretsForPod: each named Secret read (an empty name skipped), its
    keyring passed to the pull; one missing or malformed is left out with one event naming them."""
    import base64
    import json

    from nodeagent.agent.images.credentials import Credential

    def docker_secret(user: str) -> dict[str, Any]:
        doc = {"auths": {"registry.test": {"username": user, "password": "pw"}}}
        return {"type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": base64.b64encode(json.dumps(doc).encode()).decode()}}

    stored = {"one": docker_secret("one"), "bad": {"type": "kubernetes.io/dockerconfigjson",
                                                  "data": {".dockerconfigjson": "!!"}}, "two": docker_secret("two")}
    reads: list[tuple[str, str, str]] = []

    async def objects(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        reads.append((resource, namespace, name))
        return stored.get(name)

    images, events = FakeImages(), []
    refs = [{"name": "one"}, {"name": ""}, {"name": "gone"}, {"name": "bad"}, {"name": "two"}]
    ic = image_container(tmp_path, images, FakeOci(), Sleeps(), events, spec={"imagePullSecrets": refs},
                         objects=objects)
    await ic.prepare(lambda w: None)
    assert reads == [("secrets", "default", n) for n in ("one", "gone", "bad", "two")]
    assert images.secrets == [[{"registry.test": Credential("one", "pw")}, {"registry.test": Credential("two", "pw")}]]
    assert events == [("FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (gone, bad); "
                                                          "attempting to pull the image may not succeed.")]
    # without a cluster client every secret is missing, and the pull is anonymous
    images2, events2 = FakeImages(), []
    await image_container(tmp_path / "b", images2, FakeOci(), Sleeps(), events2,
                          spec={"imagePullSecrets": [{"name": "one"}]}).prepare(lambda w: None)
    assert images2.secrets == [[]] and [r for r, _ in events2] == ["FailedToRetrieveImagePullSecret"]


async def test_an_invalid_image_name_waits_the_resync(tmp_path: Path) -> None:
    images = FakeImages([E.InvalidImageName("bad name"), RECORD])
    images.backoff.left = 0.0
    sleeps, seen = Sleeps(), []
    await image_container(tmp_path, images, FakeOci(), sleeps).prepare(seen.append)
    assert [w.reason for w in seen] == ["ContainerCreating", "InvalidImageName"]
    assert sleeps.waits == [10.0]


@pytest.mark.parametrize(("error", "reason"), [
    (FieldError("image.config.User", "unable to find user app"), "CreateContainerConfigError"),
    (OSError(5, "mount overlay: I/O error"), "CreateContainerError"),
])
async def test_a_bundle_that_cannot_be_made_waits_with_its_reason_an_event_and_back_off(
        tmp_path: Path, error: Exception, reason: str) -> None:
    oci, sleeps, seen, events = FakeOci([error, error]), Sleeps(), [], []
    await image_container(tmp_path, FakeImages(), oci, sleeps, events).prepare(seen.append)
    assert [w.reason for w in seen] == ["ContainerCreating", reason, reason]
    assert str(error) in seen[1].message
    assert sleeps.waits == [10.0, 20.0]  # the kubelet's doubling back-off
    assert events == [("Failed", f"Error: {error}")] * 2
    assert len(oci.bundles) == 1


async def test_the_bundle_follows_the_plan_and_the_image(tmp_path: Path) -> None:
    oci = FakeOci()
    ic = image_container(tmp_path, FakeImages(), oci, Sleeps(), args=["echo $(MINE)"],
                         env=[{"name": "MINE", "value": "own"}, {"name": "MODE", "value": "pod"}],
                         resources={"limits": {"memory": "64Mi", "cpu": "1"}})
    await ic.prepare(lambda w: None)
    (b,) = oci.bundles
    assert b.argv == ("/bin/sh", "-c", "echo own")  # args replace Cmd, Entrypoint kept, $(VAR) expanded
    assert b.env == ("PATH=/bin", "MODE=pod", "MINE=own")  # the image's first, the container's over them
    assert b.cwd == "/srv" and (b.uid, b.gid) == (0, 0) and b.hostname == "web"
    c = ic.c
    assert b.cgroups_path == f"/{c.cgroup_path}/oci" and b.oom_score_adj == c.config.oom_score_adj == -997
    assert b.resources.cpu_quota_us == c.cgroup_spec.cpu_quota_us and b.resources.memory_max is None
    etc = {m.destination: Path(m.source).read_text() for m in b.mounts}
    assert set(etc) == {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
    assert etc["/etc/hostname"] == "web\n" and "127.0.1.1\tweb" in etc["/etc/hosts"]


# ---- through the pod manager ----


def make_manager(state_dir: Path, images: FakeImages | None, oci: FakeOci | None, sleeps: Sleeps,
                 events: EventRecorder) -> PodManager:
    env = PodEnv(driver=FakeCgroupDriver(), state_dir=str(state_dir), memory_capacity=4 * GI, clock=SystemClock(),
                 backoff_factory=lambda: CrashBackoff(initial=0.05, maximum=0.2), events=events,
                 images=images, oci=oci, sleep=sleeps)  # type: ignore[arg-type]
    allocatable = {"cpu": parse_quantity("2"), "memory": parse_quantity("1Gi"), "pods": parse_quantity("10")}
    m = PodManager(env, CheckpointStore.open(state_dir), allocatable=allocatable, enforced_allocatable=None,
                   max_pods=10)
    m.setup_cgroups()
    return m


async def until(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
    return value


def state(m: PodManager) -> dict[str, Any]:
    pod = m.get_pod("default", "web")
    assert pod is not None
    return dict(pod["status"]["containerStatuses"][0]["state"])


async def test_an_image_pod_runs_from_its_bundle_and_its_removal_cleans_up(tmp_path: Path) -> None:
    images, oci, sleeps = FakeImages([E.PullFailed("connection refused"), RECORD]), FakeOci(), Sleeps()
    m = make_manager(tmp_path / "state", images, oci, sleeps, EventRecorder(SystemClock(), "node-a"))
    images.backoff.left = 0.0
    await m.create_pod(pod_manifest({"args": ["echo from the bundle; sleep 30"]}))
    await until(lambda: "running" in state(m))
    w = m.pods[("default", "web")]
    assert w.running and oci.bundles[-1].argv == ("/bin/sh", "-c", "echo from the bundle; sleep 30")
    await until(lambda: "from the bundle" in Path(w.workers["main"].log_path).read_text())
    assert sleeps.waits == [FIRST_RETRY_S]
    (status,) = w.to_dict()["status"]["containerStatuses"]
    # image: the spec's reference; imageID: the repo digest it runs
    assert (status["image"], status["imageID"]) == (IMAGE, RECORD.repo_digests[0])
    await m.delete_pod("default", "web", 0)
    await until(lambda: m.get_pod("default", "web") is None)
    cid = f"{w.plan.uid}-main"
    assert oci.cleaned == [cid] and images.released == [cid] and images.leases == {}


def test_the_runtime_cgroup_is_made_next_to_kubepods_only_with_a_runtime(tmp_path: Path) -> None:
    """The runtime's monitors run outside kubepods and the pods' limits (layout.RUNTIME_PATH)."""
    events = EventRecorder(SystemClock(), "node-a")
    with_runtime = make_manager(tmp_path / "a", FakeImages(), FakeOci(), Sleeps(), events)
    without = make_manager(tmp_path / "b", FakeImages(), None, Sleeps(), events)
    assert with_runtime.env.driver.specs[RUNTIME_PATH] == CgroupSpec()  # type: ignore[attr-defined]
    assert not RUNTIME_PATH.startswith(KUBEPODS)
    assert RUNTIME_PATH not in without.env.driver.specs  # type: ignore[attr-defined]


async def test_an_image_pod_on_a_node_without_a_runtime_is_refused(tmp_path: Path) -> None:
    m = make_manager(tmp_path / "state", FakeImages(), None, Sleeps(), EventRecorder(SystemClock(), "node-a"))
    with pytest.raises(ValidationErrors) as e:
        await m.create_pod(pod_manifest({}))
    assert [err.path for err in e.value.errors] == ["spec.containers[0].image"]
    assert m.get_pod("default", "web") is None


async def test_a_restored_image_container_without_a_runtime_waits_and_never_runs_on_the_host(tmp_path: Path) -> None:
    """The agent lost its runtime (ociRuntime changed) with an image pod in its checkpoints."""
    state_dir = tmp_path / "state"
    events = EventRecorder(SystemClock(), "node-a")
    m = make_manager(state_dir, FakeImages([E.PullFailed("registry down")]), FakeOci(), Sleeps(), events)
    await m.create_pod(pod_manifest({"args": [f"touch {tmp_path}/ran"]}))
    await until(lambda: state(m).get("waiting", {}).get("reason") == "ErrImagePull")
    await m.flush()
    await m.detach_all()  # an agent shutdown: the next agent restores the pod from its record
    again = make_manager(state_dir, None, None, Sleeps(), events)
    await again.restore()
    await until(lambda: state(again).get("waiting", {}).get("reason") == "CreateContainerError")
    assert "no OCI runtime" in state(again)["waiting"]["message"]
    await asyncio.sleep(0.1)
    assert not (tmp_path / "ran").exists() and not again.pods[("default", "web")].running
    await again.delete_pod("default", "web", 0)
    await until(lambda: again.get_pod("default", "web") is None)
