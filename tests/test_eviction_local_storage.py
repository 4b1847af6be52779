"""Local-storage eviction (the kubelet's localStorageEviction: emptyDirLimitEviction,
podEphemeralStorageLimitEviction, containerEphemeralStorageLimitEviction): the pure checks, the
manager's pass that evicts first and at once, and the pod side that measures only pods with a
limit (their layers, logs and disk-backed emptyDirs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.local_storage import (
    ContainerStorageUsage,
    EmptyDirUsage,
    PodStorageUsage,
    Violation,
    container_ephemeral_violation,
    empty_dir_violation,
    local_storage_violation,
    pod_ephemeral_violation,
)
from nodeagent.agent.eviction.manager import LOCAL_STORAGE, EvictionManager
from nodeagent.agent.eviction.observations import Observation, PodUsage
from nodeagent.agent.pods.eviction_access import local_storage_violations, pod_storage_usage
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import Quantity, parse_quantity
from nodeagent.core.resources import pod_limits

MI = 1 << 20


def q(text: str) -> Quantity:
    return parse_quantity(text)


@pytest.mark.parametrize(("volumes", "message"), [
    ([], None),
    ([EmptyDirUsage("cache", q("1Mi"), MI)], None),  # at the limit: not over it
    ([EmptyDirUsage("cache", q("1Mi"), MI + 4096)], 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". '),
    ([EmptyDirUsage("cache", None, 10 * MI)], None),  # no sizeLimit
    ([EmptyDirUsage("cache", q("0"), 10 * MI)], None),  # a zero limit is no limit
    ([EmptyDirUsage("a", q("2Mi"), MI), EmptyDirUsage("b", q("500k"), 600_000)],
     'Usage of EmptyDir volume "b" exceeds the limit "500k". '),
])
def test_empty_dir_violation(volumes: list[EmptyDirUsage], message: str | None) -> None:
    assert empty_dir_violation(volumes) == message


POD_MSG = "Pod ephemeral local storage usage exceeds the total limit of containers {}. "
CONTAINER_MSG = 'Container {} exceeded its local ephemeral storage limit "{}". '


def spec_pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Pod:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"},
                      "spec": {"containers": containers, "initContainers": init or []}})


def es(name: str, limit: str | None, restart: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if limit is not None:
        c["resources"] = {"limits": {"ephemeral-storage": limit}}
    if restart is not None:
        c["restartPolicy"] = restart
    return c


# upstream TestStorageLimitEvictions / PodLimits: a pod-level limit exists as soon as one container
# declares one (summed with the sidecars', or a bigger init container's), and is compared strictly
@pytest.mark.parametrize(("containers", "init", "used", "message"), [
    ([es("a", None)], [], 10 * MI, None),  # no limit anywhere: no pod-level check
    ([es("a", "1Mi")], [], MI, None),  # at the limit
    ([es("a", "1Mi")], [], MI + 1, POD_MSG.format("1Mi")),
    ([es("a", "1Mi"), es("b", None)], [], 2 * MI, POD_MSG.format("1Mi")),  # only a declares one: still checked
    ([es("a", "1Mi"), es("b", "2Mi")], [], 3 * MI, None),  # summed: 3Mi
    ([es("a", "1Mi"), es("b", "2Mi")], [], 3 * MI + 4096, POD_MSG.format("3Mi")),
    ([es("a", "1Mi")], [es("init", "4Mi")], 3 * MI, None),  # a bigger init container's limit is the pod's
    ([es("a", "1Mi")], [es("side", "1Mi", "Always")], 2 * MI + 1, POD_MSG.format("2Mi")),  # a sidecar adds up
])
def test_pod_ephemeral_violation(containers: list[dict[str, Any]], init: list[dict[str, Any]], used: int,
                                 message: str | None) -> None:
    assert pod_ephemeral_violation(pod_limits(spec_pod(containers, init)), used) == message


@pytest.mark.parametrize(("containers", "message"), [
    ([], None),
    ([ContainerStorageUsage("a", q("1Mi"), MI)], None),  # at the limit
    ([ContainerStorageUsage("a", q("1Mi"), MI + 1)], CONTAINER_MSG.format("a", "1Mi")),
    ([ContainerStorageUsage("a", None, 100 * MI)], None),  # no limit (an init container)
    ([ContainerStorageUsage("a", q("0"), 100 * MI)], None),  # a zero limit is skipped
    ([ContainerStorageUsage("a", q("2Mi"), MI), ContainerStorageUsage("b", q("500k"), 500_001)],
     CONTAINER_MSG.format("b", "500k")),
])
def test_container_ephemeral_violation(containers: list[ContainerStorageUsage], message: str | None) -> None:
    assert container_ephemeral_violation(containers) == message


def test_the_checks_run_in_the_kubelets_order() -> None:
    """emptyDir first, then the pod, then a container: the first that fails is the message."""
    limits = {"ephemeral-storage": q("3Mi")}
    dirs = [EmptyDirUsage("v", q("1Mi"), 2 * MI)]
    over_a = [ContainerStorageUsage("a", q("1Mi"), 2 * MI), ContainerStorageUsage("b", q("2Mi"), 0)]
    assert local_storage_violation(limits, PodStorageUsage(dirs, over_a, 4 * MI)) == Violation(
        "emptydirfs.limit", 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". ')
    assert local_storage_violation(limits, PodStorageUsage([], over_a, 4 * MI)) == Violation(
        "ephemeralpodfs.limit", POD_MSG.format("3Mi"))
    assert local_storage_violation(limits, PodStorageUsage([], over_a, 2 * MI)) == Violation(
        "ephemeralcontainerfs.limit", CONTAINER_MSG.format("a", "1Mi"))
    assert local_storage_violation(limits, PodStorageUsage([], over_a[1:], 2 * MI)) is None


def plan(name: str, volumes: list[dict[str, Any]], state_dir: str = "/state",
         containers: list[dict[str, Any]] | None = None) -> PodPlan:
    return plan_pod(parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "uid": f"uid-{name}"},
                               "spec": {"containers": containers or [{"name": "c", "image": "busybox"}],
                                        "volumes": volumes}}),
                    state_dir=state_dir, memory_capacity=1 << 30)


class Pods:
    def __init__(self, plans: list[PodPlan], over: dict[str, Violation]) -> None:
        self.plans = plans
        self.over = over
        self.evicted: list[tuple[str, float, str]] = []

    def evictable_pods(self) -> list[PodPlan]:
        return self.plans

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        return {p.metadata.uid: PodUsage(p.metadata.uid) for p in pods}

    def kill(self, pod: Pod) -> None:
        pass

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        self.evicted.append((pod.metadata.name, grace_period, message))
        self.plans = [p for p in self.plans if p.pod.metadata.name != pod.metadata.name]

    async def reclaim_node_garbage(self) -> int:
        return 0

    async def local_storage(self) -> list[tuple[Pod, Violation]]:
        return [(p.pod, self.over[p.pod.metadata.name]) for p in self.plans if p.pod.metadata.name in self.over]


async def test_a_pod_over_its_empty_dir_limit_is_evicted_at_once_without_node_pressure() -> None:
    clock = FakeClock()
    pods = Pods([plan("a", []), plan("b", []), plan("c", [])],
                {"b": Violation("emptydirfs.limit", 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". '),
                 "c": Violation("ephemeralpodfs.limit", POD_MSG.format("1Mi"))})
    events = EventRecorder(clock, "n1")
    m = EvictionManager(parse_thresholds({"memory.available": "100Mi"}, {}, {}, {}),
                        lambda: {"memory.available": Observation(1 << 30, 1 << 30, clock.now())}, pods, events, clock,
                        transition_period=300.0, max_pod_grace_period=30, interval=10.0,
                        local_storage=pods.local_storage)
    result = await m.synchronize()
    assert pods.evicted == [("b", 0, 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". '),
                            ("c", 0, POD_MSG.format("1Mi"))]
    assert result.signal == LOCAL_STORAGE and result.evicted == ("default/b", "default/c") and result.conditions == ()
    assert [(e["reason"], e["message"]) for e in events.list()[-2:]] == [
        ("Evicted", 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". '), ("Evicted", POD_MSG.format("1Mi"))]
    assert m.evictions_total == {"emptydirfs.limit": 1, "ephemeralpodfs.limit": 1}  # the kubelet's metrics labels
    assert (await m.synchronize()).evicted == ()  # gone: nothing more


def test_only_disk_empty_dirs_with_a_limit_are_measured(tmp_path: Path) -> None:
    over = plan("over", [{"name": "v", "emptyDir": {"sizeLimit": "64Ki"}}], str(tmp_path))
    under = plan("under", [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}], str(tmp_path))
    unlimited = plan("free", [{"name": "v", "emptyDir": {}}], str(tmp_path))
    memory = plan("mem", [{"name": "v", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}], str(tmp_path))
    for p, size in ((over, 128 << 10), (under, 128 << 10), (unlimited, 4 * MI), (memory, 128 << 10)):
        d = Path(p.log_dir) / "_volumes" / "kubernetes.io~empty-dir" / "v"
        d.mkdir(parents=True)
        (d / "data").write_bytes(b"x" * size)
    assert local_storage_violations([over, under, unlimited, memory]) == [
        (over.pod, Violation("emptydirfs.limit", 'Usage of EmptyDir volume "v" exceeds the limit "64Ki". '))]


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_pod_usage_counts_layers_logs_and_disk_empty_dirs_only(tmp_path: Path) -> None:
    """An image container's upper dir and logs, a host process's logs, disk-backed emptyDirs; not
    the image's rootfs mount point, nor a memory-backed emptyDir."""
    p = plan("p", [{"name": "disk", "emptyDir": {}}, {"name": "mem", "emptyDir": {"medium": "Memory"}}],
             str(tmp_path), containers=[{"name": "img", "image": "registry.local/x:1", **LIMIT_1MI},
                                       {"name": "host", "image": "", "command": ["sleep"], **LIMIT_1MI}])
    pod_dir = Path(p.log_dir)
    write(pod_dir / "oci" / "img" / "upper" / "tmp" / "big", 512 << 10)
    write(pod_dir / "oci" / "img" / "rootfs" / "bin" / "image-file", 8 * MI)  # the image, read-only
    write(pod_dir / "img" / "0.log", 64 << 10)
    write(pod_dir / "host" / "0.log", 128 << 10)
    write(pod_dir / "_volumes" / "kubernetes.io~empty-dir" / "disk" / "f", 256 << 10)
    write(pod_dir / "_volumes" / "kubernetes.io~empty-dir" / "mem" / "f", 4 * MI)
    usage = pod_storage_usage(p)
    assert {c.name: c.used // 1024 for c in usage.containers} == {"img": 576 + 4, "host": 128}  # + the dirs' blocks
    assert [(v.volume, v.used // 1024) for v in usage.empty_dirs] == [("disk", 256)]
    assert usage.used == sum(c.used for c in usage.containers) + usage.empty_dirs[0].used
    assert usage.used < 2 * MI and local_storage_violations([p]) == []  # 2Mi: the two limits summed
    write(pod_dir / "_volumes" / "kubernetes.io~empty-dir" / "disk" / "g", 2 * MI)  # the emptyDir counts in
    assert local_storage_violations([p]) == [(p.pod, Violation("ephemeralpodfs.limit", POD_MSG.format("2Mi")))]


LIMIT_1MI = {"resources": {"limits": {"ephemeral-storage": "1Mi"}}}


def test_a_container_over_its_own_limit_under_the_pods(tmp_path: Path) -> None:
    p = plan("p", [], str(tmp_path), containers=[
        {"name": "a", "image": "registry.local/x:1", **LIMIT_1MI},
        {"name": "b", "image": "registry.local/x:1", "resources": {"limits": {"ephemeral-storage": "8Mi"}}}])
    write(Path(p.log_dir) / "oci" / "a" / "upper" / "big", 2 * MI)
    assert local_storage_violations([p]) == [(p.pod, Violation("ephemeralcontainerfs.limit",
                                                               CONTAINER_MSG.format("a", "1Mi")))]
    assert local_storage_violations([dataclasses.replace(p, critical=True)]) == []  # evictPod refuses critical pods
    unlimited = plan("free", [], str(tmp_path))
    write(Path(unlimited.log_dir) / "c" / "0.log", 4 * MI)
    assert local_storage_violations([unlimited]) == []
