"""Disk pressure deletes unused images before it evicts pods, as the kubelet's node reclaim funcs
do (pkg/kubelet/eviction/helpers.go buildSignalToNodeReclaimFuncs): which signals reach the images
(pure, a table), and the manager's order (dead pods' data, then images, then pods) against a fake
node whose disks, images and pods are plain numbers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.evaluate import IMAGE_RECLAIM_ALL, image_reclaim_bytes
from nodeagent.agent.eviction.manager import EvictionManager, ImageReclaim
from nodeagent.agent.eviction.observations import Observation, PodUsage
from nodeagent.agent.images.manager import ImageManager
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Pod, parse_pod

GB = 1 << 30  # GiB: thresholds below are quantities (percentages go through float32, as in the kubelet)
DISK = 100 * GB


def pod(name: str) -> PodPlan:
    return plan_pod(parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "uid": f"uid-{name}"},
                               "spec": {"containers": [{"name": "c", "command": ["x"]}]}}),
                    state_dir="/state", memory_capacity=8 * GB)


def threshold(signal: str, value: str, min_reclaim: str | None = None):  # type: ignore[no-untyped-def]
    (t,) = parse_thresholds({signal: value}, {}, {}, {signal: min_reclaim} if min_reclaim else {})
    return t


# ---- which signals reach the images (pure) ----

@pytest.mark.parametrize(("signal", "dedicated", "applies"), [
    # a shared disk: every disk signal deletes unused images
    ("nodefs.available", False, True),
    ("nodefs.inodesFree", False, True),
    ("imagefs.available", False, True),
    ("imagefs.inodesFree", False, True),
    # imagefs on its own device: only its own signals; the images are not on nodefs
    ("nodefs.available", True, False),
    ("nodefs.inodesFree", True, False),
    ("imagefs.available", True, True),
    ("imagefs.inodesFree", True, True),
    # never for memory or pids
    ("memory.available", False, False),
    ("allocatableMemory.available", False, False),
    ("pid.available", False, False),
])
def test_which_signals_delete_images(signal: str, dedicated: bool, applies: bool) -> None:
    t = threshold(signal, "50%")
    observed = Observation(available=10, capacity=100)  # well below: a shortfall of 40 (bytes or inodes)
    got = image_reclaim_bytes(t, observed, dedicated_imagefs=dedicated)
    if not applies:
        assert got == 0
    elif t.resource == "inodes":
        assert got == IMAGE_RECLAIM_ALL  # no byte figure for inodes: every unused image
    else:
        assert got == 40


@pytest.mark.parametrize(("value", "min_reclaim", "available", "needed"), [
    ("10Gi", None, 6 << 30, 4 << 30),  # the shortfall
    ("10Gi", "2Gi", 6 << 30, 6 << 30),  # plus the minimum reclaim
    ("10%", "1%", 5 * 10**9, None),  # percentages of the capacity (float32, as the kubelet)
    ("10Gi", None, 11 << 30, 0),  # not short: nothing to delete
])
def test_image_bytes_are_the_shortfall_with_min_reclaim(value: str, min_reclaim: str | None, available: int,
                                                        needed: int | None) -> None:
    t = threshold("imagefs.available", value, min_reclaim)
    got = image_reclaim_bytes(t, Observation(available, DISK), dedicated_imagefs=True)
    if needed is None:  # 11% of the disk, less what is free
        assert abs(got - (0.11 * DISK - available)) < 1000
    else:
        assert got == needed


def test_no_observation_no_image_reclaim() -> None:
    assert image_reclaim_bytes(threshold("imagefs.available", "10%"), None, dedicated_imagefs=False) == 0


def test_the_image_manager_is_an_image_reclaim() -> None:
    reclaim: type[ImageReclaim] = ImageManager  # mypy checks the protocol; here its signature
    assert callable(reclaim.reclaim)


# ---- the manager's order, against a fake node ----

@dataclass
class FakeImage:
    name: str
    size: int
    in_use: bool = False
    inodes: int = 0


class Disks:
    """nodefs and (when dedicated) imagefs; dead pods' data on nodefs, images on imagefs; the
    pods' own usage on nodefs; a log of every reclaim and eviction, in order."""

    def __init__(self, clock: FakeClock, *, dedicated: bool, nodefs_used: int, imagefs_used: int = 0,
                 garbage: int = 0, images: Sequence[FakeImage] = (), pods: Sequence[tuple[PodPlan, int]] = (),
                 fail_images: bool = False, inodes_used: int = 0) -> None:
        self.clock = clock
        self.dedicated = dedicated
        self.nodefs_used = nodefs_used  # besides garbage, images (shared) and pods
        self.imagefs_used = imagefs_used  # besides images (dedicated only)
        self.garbage = garbage
        self.images = list(images)
        self.pods = {p.pod.metadata.name: (p, used) for p, used in pods}
        self.fail_images = fail_images
        self.inodes_used = inodes_used  # besides the images' (a shared disk)
        self.log: list[str] = []
        self.image_requests: list[int] = []

    def _image_bytes(self) -> int:
        return sum(i.size for i in self.images)

    def observe(self) -> dict[str, Observation]:
        now = self.clock.now()
        node_used = self.nodefs_used + self.garbage + sum(u for _, u in self.pods.values())
        image_used = self.imagefs_used + self._image_bytes()
        if not self.dedicated:
            node_used += image_used
            image_used = node_used
        node = Observation(DISK - node_used, DISK, now)
        image = Observation(DISK - image_used, DISK, now)
        inodes = Observation(1000 - self.inodes_used - sum(i.inodes for i in self.images), 1000, now)
        return {"nodefs.available": node, "imagefs.available": image, "nodefs.inodesFree": inodes,
                "imagefs.inodesFree": inodes}

    # PodsAccess
    def evictable_pods(self) -> list[PodPlan]:
        return [p for p, _ in self.pods.values()]

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        return {p.metadata.uid: PodUsage(p.metadata.uid, ephemeral_storage=self.pods[p.metadata.name][1])
                for p in pods}

    def kill(self, pod: Pod) -> None:
        self.log.append(f"kill {pod.metadata.name}")

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        self.log.append(f"evict {pod.metadata.name}")
        del self.pods[pod.metadata.name]

    async def reclaim_node_garbage(self) -> int:
        freed, self.garbage = self.garbage, 0
        self.log.append(f"garbage {freed}")
        return freed

    # ImageReclaim: unused images, in list order (the oldest first), until enough is freed
    async def reclaim(self, bytes_needed: int) -> int:
        self.image_requests.append(bytes_needed)
        if self.fail_images:
            raise OSError("the image store is read-only")
        freed = 0
        for image in list(self.images):
            if freed >= bytes_needed:
                break
            if not image.in_use:
                self.images.remove(image)
                freed += image.size
                self.log.append(f"image {image.name}")
        return freed


def make(disks: Disks, hard: dict[str, str], *, images: bool = True,
         min_reclaim: dict[str, str] | None = None) -> EvictionManager:
    return EvictionManager(parse_thresholds(hard, {}, {}, min_reclaim or {}), disks.observe, disks,
                           EventRecorder(disks.clock, "n1"), disks.clock, transition_period=0,
                           max_pod_grace_period=0, interval=10.0, images=disks if images else None,
                           dedicated_imagefs=lambda: disks.dedicated)


async def test_shared_disk_nodefs_pressure_deletes_unused_images_instead_of_evicting() -> None:
    # 95 GB used of 100: 5 GB free < 10%; dead pods hold 1 GB, unused images 8 GB
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=70 * GB, garbage=1 * GB,
                  images=[FakeImage("old", 3 * GB), FakeImage("busy", 10 * GB, in_use=True),
                          FakeImage("mid", 5 * GB), FakeImage("new", 6 * GB)],
                  pods=[(pod("a"), 0)])
    m = make(disks, {"nodefs.available": "10Gi"})
    result = await m.synchronize()
    # garbage first (1 GB: 6 GB free, still short of 10 GB), then images for the 4 GB left: old, mid
    assert disks.log == [f"garbage {GB}", "image old", "image mid"]
    assert disks.image_requests == [4 * GB]
    assert result.evicted == () and result.reclaimed_image_bytes == 8 * GB
    assert result.reclaimed_bytes == 9 * GB
    assert [i.name for i in disks.images] == ["busy", "new"]  # in use, and not needed


async def test_garbage_enough_leaves_the_images() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=80 * GB, garbage=15 * GB,
                  images=[FakeImage("old", 3 * GB)], pods=[(pod("a"), 0)])
    result = await make(disks, {"nodefs.available": "10Gi"}).synchronize()
    assert disks.log == [f"garbage {15 * GB}"] and disks.image_requests == []
    assert result.evicted == () and result.reclaimed_image_bytes == 0


async def test_dedicated_imagefs_pressure_deletes_images_before_evicting() -> None:
    disks = Disks(FakeClock(), dedicated=True, nodefs_used=10 * GB, imagefs_used=80 * GB,
                  images=[FakeImage("old", 4 * GB), FakeImage("new", 4 * GB)], pods=[(pod("a"), 5 * GB)])
    result = await make(disks, {"imagefs.available": "15Gi"}).synchronize()
    # 88 used: 12 free < 15: 3 GB short; "old" covers it
    assert disks.log == ["garbage 0", "image old"] and disks.image_requests == [3 * GB]
    assert result.evicted == ()


async def test_dedicated_imagefs_leaves_images_on_nodefs_pressure() -> None:
    disks = Disks(FakeClock(), dedicated=True, nodefs_used=85 * GB, imagefs_used=0,
                  images=[FakeImage("old", 50 * GB)], pods=[(pod("hog"), 10 * GB)])
    result = await make(disks, {"nodefs.available": "10Gi"}).synchronize()
    assert disks.image_requests == [] and disks.log == ["garbage 0", "kill hog", "evict hog"]
    assert result.evicted == ("default/hog",)


async def test_images_in_use_fall_short_then_pods_are_evicted() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=75 * GB,
                  images=[FakeImage("small", 1 * GB), FakeImage("busy", 10 * GB, in_use=True)],
                  pods=[(pod("hog"), 10 * GB)])
    result = await make(disks, {"imagefs.available": "10Gi"}).synchronize()
    # 96 used: 4 free, 6 GB short: "small" frees 1, the pod goes for the rest
    assert disks.log == ["garbage 0", "image small", "kill hog", "evict hog"]
    assert result.evicted == ("default/hog",) and result.reclaimed_image_bytes == GB


async def test_min_reclaim_is_asked_of_the_images() -> None:
    # 78 + 10 images = 88 used: 12 free, 3 short of 15, and 2 more for the minimum reclaim
    disks = Disks(FakeClock(), dedicated=True, imagefs_used=78 * GB, nodefs_used=0,
                  images=[FakeImage(f"i{n}", GB) for n in range(10)])
    result = await make(disks, {"imagefs.available": "15Gi"}, min_reclaim={"imagefs.available": "2Gi"}).synchronize()
    assert disks.image_requests == [3 * GB + (2 << 30)]
    assert [line for line in disks.log if line.startswith("image")] == [f"image i{n}" for n in range(5)]
    assert result.evicted == ()


async def test_inode_pressure_deletes_every_unused_image() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=0, inodes_used=900,
                  images=[FakeImage("a", GB, inodes=40), FakeImage("b", GB, inodes=40, in_use=True),
                          FakeImage("c", GB, inodes=40)])
    result = await make(disks, {"nodefs.inodesFree": "5%"}).synchronize()  # 1000-1020 < 50: short
    assert disks.image_requests == [IMAGE_RECLAIM_ALL]
    assert [i.name for i in disks.images] == ["b"] and result.evicted == ()


async def test_a_failing_image_reclaim_still_evicts() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=85 * GB, images=[FakeImage("old", 5 * GB)],
                  pods=[(pod("hog"), 5 * GB)], fail_images=True)
    result = await make(disks, {"nodefs.available": "10Gi"}).synchronize()
    assert disks.image_requests == [5 * GB] and result.evicted == ("default/hog",)


async def test_without_images_the_pass_goes_from_garbage_to_eviction() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=85 * GB, images=[FakeImage("old", 5 * GB)],
                  pods=[(pod("hog"), 5 * GB)])
    result = await make(disks, {"nodefs.available": "10Gi"}, images=False).synchronize()
    assert disks.log == ["garbage 0", "kill hog", "evict hog"] and result.evicted == ("default/hog",)


async def test_memory_pressure_never_touches_the_images() -> None:
    disks = Disks(FakeClock(), dedicated=False, nodefs_used=0, images=[FakeImage("old", 5 * GB)])

    def observe() -> dict[str, Observation]:
        return {**disks.observe(), "memory.available": Observation(10, 8 * GB, disks.clock.now())}

    m = make(disks, {"memory.available": "100Mi"})
    m.observe = observe
    await m.synchronize()
    assert disks.image_requests == [] and disks.log == []
