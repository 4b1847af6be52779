"""A reload reaches each part through its one `reconfigure` (daemon.Agent.reconfigure), and the
kubepods memory.high the eviction wake-ups keep follows a lowered enforced memory exactly, so the
pods cgroup's limits can be rewritten with it (one clamp, in the wake-ups)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fakes import FakeCgroupDriver

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.config.settings import Config, parse_config
from nodeagent.agent.daemon import Agent, NodeFacts
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.manager import EvictionManager
from nodeagent.agent.eviction.observations import Observation
from nodeagent.agent.eviction.wakeups import HIGH_MARGIN, HIGH_SLACK, MEMORY_EVENTS, MemoryWakeups
from nodeagent.agent.node.allocatable import NodeAllocatable, allocatable_for
from nodeagent.agent.node.capacity import Capacity
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.core.clock import FakeClock
from nodeagent.daemonkit.auth import Authenticator
from nodeagent.daemonkit.sdnotify import Notifier

GI, MI = 1 << 30, 1 << 20
CAPACITY = Capacity(milli_cpu=2000, memory=4 * GI, ephemeral_storage=100 * GI, pods=110, inodes=10**6, pid_max=10**6)


def config(tmp_path: Path, **keys: Any) -> Config:
    return parse_config({"stateDir": str(tmp_path / "state"), "address": "127.0.0.1", "authentication": "none",
                         "nodeName": "n1", **keys}, "test")


def test_a_reload_reaches_every_part(tmp_path: Path) -> None:
    old = config(tmp_path)
    driver = FakeCgroupDriver(f"/agent-{uuid.uuid4().hex[:8]}")
    agent = Agent(old, NodeFacts(CAPACITY, allocatable_for(CAPACITY, old), "n1", {}), driver=driver,
                  clock=FakeClock(), checkpoints=CheckpointStore.open(tmp_path / "state"),
                  auth=Authenticator.from_config(old), ssl_context=None, notifier=Notifier(None))
    agent.pods.setup_cgroups()
    new = config(tmp_path, systemReserved={"memory": "1Gi"}, maxPods=20, housekeepingInterval="3s",
                 evictionHard={"memory.available": "300Mi"}, staticPodPath=str(tmp_path / "manifests"))
    allocatable = allocatable_for(CAPACITY, new)
    agent.reconfigure(new, allocatable)
    assert agent.config is new and agent.allocatable is allocatable
    assert agent.reporter.allocatable is allocatable
    assert agent.reporter.node()["status"]["allocatable"]["memory"] == str(allocatable.allocatable["memory"])
    assert agent.pods.allocatable == allocatable.allocatable and agent.pods.max_pods == 20
    assert driver.specs[layout.KUBEPODS].memory_max == 3 * GI  # capacity - systemReserved
    assert agent.observer.allocatable_memory == allocatable.enforced_memory == 3 * GI
    assert [t.value_text() for t in agent.eviction.thresholds if t.signal == "memory.available"] == ["300Mi"]
    assert agent.eviction.interval == 3.0 and agent.eviction.wake.is_set()
    assert agent.static.directory == str(tmp_path / "manifests") and agent.static.source is not None


class KubepodsDriver(FakeCgroupDriver):
    """A fake driver whose kubepods reads `inactive_file` bytes of page cache, with a real v2
    memory.high file on disk (what the wake-ups write)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self.MOUNT = str(tmp_path)  # type: ignore[misc]
        self.inactive_file = 0
        self.dir = Path(self.memory_dir(layout.KUBEPODS))
        self.dir.mkdir(parents=True)
        (self.dir / "memory.high").write_text("max")
        self.create(layout.KUBEPODS, CgroupSpec(memory_max=2 * GI))

    def memory_usage(self, path: str) -> tuple[int, int]:
        return self.inactive_file, self.inactive_file

    @property
    def memory_high(self) -> str:
        return (self.dir / "memory.high").read_text()


def enforced(memory: int, cfg: Config) -> NodeAllocatable:
    capacity = Capacity(milli_cpu=2000, memory=memory, ephemeral_storage=GI, pods=110, inodes=10**6, pid_max=10**6)
    return allocatable_for(capacity, cfg)


def test_memory_high_follows_a_lowered_enforced_memory_exactly(tmp_path: Path) -> None:
    driver = KubepodsDriver(tmp_path)
    driver.inactive_file = 200 * MI  # page cache moves the allocatable line above the enforced memory
    clock = FakeClock()
    cfg = config(tmp_path, evictionHard={"memory.available": "100Mi"})  # and allocatableMemory.available 100Mi
    manager = EvictionManager(cfg.thresholds, dict, None, EventRecorder(clock, "n1"), clock,  # type: ignore[arg-type]
                              transition_period=0, max_pod_grace_period=0, interval=10)
    wakeups = MemoryWakeups(driver, manager, 2 * GI, lambda: Observation(8 * GI, 16 * GI, 0.0),
                            mechanisms=frozenset({MEMORY_EVENTS}))
    wakeups._set_memory_high(wakeups._memory_high()[0])  # what start() arms
    assert wakeups.memory_high == 2 * GI and driver.memory_high == str(2 * GI)  # clamped to the enforced memory
    # a reload lowers the enforced memory by less than the slack after a pass would ignore
    lowered = 2 * GI - HIGH_SLACK // 2
    wakeups.reconfigure(cfg, enforced(lowered, cfg))
    assert wakeups.memory_high == lowered and driver.memory_high == str(lowered)
    # so kubepods' limits can be rewritten with it (kubepods_spec refuses memory.high above memory.max)
    manager_spec = layout.kubepods_spec(enforced(lowered, cfg).pods_limits, memory_high=wakeups.memory_high)
    assert manager_spec.memory_high == manager_spec.memory_max == lowered
    # without the page cache, memory.high sits HIGH_MARGIN above the allocatable line
    driver.inactive_file = 0
    wakeups.reconfigure(cfg, enforced(lowered, cfg))
    assert wakeups.memory_high == lowered - 100 * MI + HIGH_MARGIN
