"""A wedged component stops the systemd watchdog pings (fake clock for the bounds, a real
notify socket for the pings): the eviction loop, a pod worker step, a dead long-lived task, and
the agent's own wiring of all three (daemon.Agent, built with a fake cgroup driver, not started)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fakes import FakeCgroupDriver
from test_sdnotify import Receiver

from nodeagent.agent.config.settings import parse_config
from nodeagent.agent.config.thresholds import parse_thresholds
from nodeagent.agent.daemon import Agent, NodeFacts
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.manager import EvictionManager, pass_bound
from nodeagent.agent.eviction.observations import Observation, PodUsage
from nodeagent.agent.node.allocatable import allocatable_for
from nodeagent.agent.node.capacity import Capacity
from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.agent.runtime.supervisor import KILL_STEP_S, ContainerConfig, ContainerWorker
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import Pod, parse_pod
from nodeagent.daemonkit.auth import Authenticator
from nodeagent.daemonkit.progress import ProgressMonitor, Steps
from nodeagent.daemonkit.sdnotify import Notifier, watchdog_loop
from nodeagent.daemonkit.tasks import GuardedTasks

MI = 1 << 20
GI = 1 << 30
PING_S = 0.02  # the watchdog interval in these tests (real time; the bounds are on the fake clock)


class Pings:
    """Counts WATCHDOG=1 datagrams as systemd would see them (the receiver is test_sdnotify's)."""

    def __init__(self, path: str) -> None:
        self.receiver = Receiver(path)

    @property
    def count(self) -> int:
        return sum(1 for _, m in self.receiver.messages if m == "WATCHDOG=1")

    async def grows(self, seconds: float = 10 * PING_S) -> bool:
        """Whether pings arrive within `seconds` (the loop keeps running meanwhile)."""
        before = self.count
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(PING_S / 2)
            if self.count > before:
                return True
        return False

    def close(self) -> None:
        self.receiver.close()


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[tuple[Notifier, Pings]]:
    path = str(tmp_path / "notify.sock")
    pings = Pings(path)
    yield Notifier(path, watchdog_usec=int(PING_S * 2e6)), pings
    pings.close()


def victim() -> Pod:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "uid": "uid-hog"},
                      "spec": {"containers": [{"name": "c", "command": ["x"]}]}})


class StuckEviction:
    """A node under memory pressure whose only pod's eviction never completes."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.evicting = asyncio.Event()
        self.release = asyncio.Event()

    def observe(self) -> dict[str, Observation]:
        return {"memory.available": Observation(10 * MI, GI, self.clock.now())}

    def evictable_pods(self) -> list[PodPlan]:
        return [plan_pod(victim(), state_dir="/state", memory_capacity=GI)]

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        return {p.metadata.uid: PodUsage(p.metadata.uid, memory_working_set=500 * MI) for p in pods}

    def kill(self, pod: Pod) -> None:
        pass

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        self.evicting.set()
        await self.release.wait()

    async def reclaim_node_garbage(self) -> int:
        return 0


async def test_a_wedged_eviction_pass_stops_the_pings(notify: tuple[Notifier, Pings]) -> None:
    notifier, pings = notify
    clock = FakeClock()
    node = StuckEviction(clock)
    manager = EvictionManager(parse_thresholds({"memory.available": "100Mi"}, {}, {}, {}), node.observe, node,
                              EventRecorder(clock, "n1"), clock, transition_period=0, max_pod_grace_period=0,
                              interval=10.0)
    monitor = ProgressMonitor()
    monitor.add("eviction", manager.stalled)
    tasks = GuardedTasks("test")
    tasks.start(manager.run(), name="eviction", forever=True)
    tasks.start(watchdog_loop(notifier, healthy=monitor.healthy), name="sd-watchdog")
    try:
        await asyncio.wait_for(node.evicting.wait(), 5)
        assert await pings.grows(), "pings while the pass is young"
        clock.advance(pass_bound(10.0, 0) - 1)
        assert await pings.grows(), "pings within the bound"
        clock.advance(2)
        assert manager.stalled() and not monitor.healthy()
        await asyncio.sleep(2 * PING_S)  # a ping already in flight
        assert not await pings.grows(), "no pings once the pass is past its bound"
        node.release.set()  # the pass completes: progress again
        assert await pings.grows()
        assert monitor.healthy()
    finally:
        await tasks.close()


class BlockingCgroup:
    """A container cgroup whose kill hangs in the kernel (a thread blocked in a cgroup write)."""

    def __init__(self) -> None:
        self.unblock = threading.Event()

    def procs_files(self) -> list[str]:
        return []

    def kill(self) -> None:
        self.unblock.wait(30)

    def oom_kills(self) -> int:
        return 0


async def test_a_pod_worker_stuck_in_a_step_stops_the_pings(tmp_path: Path, notify: tuple[Notifier, Pings]) -> None:
    notifier, pings = notify
    clock = FakeClock()
    steps = Steps(clock)
    monitor = ProgressMonitor()
    monitor.add("pods", steps.overdue)
    cgroup = BlockingCgroup()
    config = ContainerConfig(name="app", launch=LaunchSpec(("/bin/true",)), log_dir=str(tmp_path / "app"),
                             restart_policy="Never", pod_name="web", pod_namespace="default")
    worker = ContainerWorker(config, cgroup, clock=clock, steps=steps)
    tasks = GuardedTasks("test")
    run = tasks.start(worker.run(), name="container")
    tasks.start(watchdog_loop(notifier, healthy=monitor.healthy), name="sd-watchdog")
    try:
        deadline = time.monotonic() + 5
        while not len(steps) and time.monotonic() < deadline:  # the process exited: its cgroup is being killed
            await asyncio.sleep(0.01)
        assert len(steps) == 1
        assert await pings.grows()
        clock.advance(KILL_STEP_S + 1)
        assert steps.overdue() == [f"pod default/web container app: kill what is left in its cgroup: "
                                   f"running for {KILL_STEP_S + 1:.1f}s (bound {KILL_STEP_S:.1f}s)"]
        await asyncio.sleep(2 * PING_S)
        assert not await pings.grows(), "no pings while the step is past its bound"
        cgroup.unblock.set()
        final = await asyncio.wait_for(run, 5)
        assert final is not None and final.exit_code == 0
        assert await pings.grows() and len(steps) == 0
    finally:
        cgroup.unblock.set()
        await tasks.close()


async def test_a_dead_loop_stops_the_pings(notify: tuple[Notifier, Pings]) -> None:
    notifier, pings = notify
    tasks = GuardedTasks("agent")
    monitor = ProgressMonitor()
    monitor.add("tasks", tasks.problems)
    crash = asyncio.Event()

    async def housekeeping() -> None:
        await crash.wait()
        raise RuntimeError("bug")

    tasks.start(housekeeping(), name="housekeeping", forever=True)
    tasks.start(watchdog_loop(notifier, healthy=monitor.healthy), name="sd-watchdog")
    try:
        assert await pings.grows()
        crash.set()
        await asyncio.sleep(2 * PING_S)
        assert not await pings.grows(), "no pings once a loop died"
        assert monitor.problems() == {"tasks": ["task housekeeping died: RuntimeError('bug')"]}
    finally:
        await tasks.close()


def make_agent(tmp_path: Path, notifier: Notifier, clock: FakeClock, checkpoints: CheckpointStore) -> Agent:
    config = parse_config({"stateDir": str(tmp_path / "state"), "address": "127.0.0.1",
                           "authentication": "none", "nodeName": "n1"}, "test")
    capacity = Capacity(milli_cpu=2000, memory=4 * GI, ephemeral_storage=100 * GI, pods=110, inodes=10**6,
                        pid_max=4 * 10**6)
    facts = NodeFacts(capacity, allocatable_for(capacity, config), "n1", {})
    return Agent(config, facts, driver=FakeCgroupDriver(f"/agent-{uuid.uuid4().hex[:8]}"), clock=clock,
                 checkpoints=checkpoints, auth=Authenticator.from_config(config),
                 ssl_context=None, notifier=notifier)


async def test_the_agent_pings_only_while_its_parts_make_progress(tmp_path: Path,
                                                                  notify: tuple[Notifier, Pings]) -> None:
    notifier, pings = notify
    clock = FakeClock()
    checkpoints = CheckpointStore.open(tmp_path / "state")  # the factory's I/O, done here
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    agent = make_agent(tmp_path, notifier, clock, checkpoints)  # wired, not started
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # the wiring wrote nothing
    assert agent.pods.env.steps is agent.steps
    stuck = asyncio.Event()

    async def wedged_pass() -> None:
        await stuck.wait()

    agent.eviction.synchronize = wedged_pass  # type: ignore[assignment,method-assign]
    agent.tasks.start(agent.eviction.run(), name="eviction", forever=True)
    agent.tasks.start(watchdog_loop(agent.notifier, healthy=agent.progress.healthy), name="sd-watchdog")
    try:
        assert await pings.grows()
        clock.advance(agent.eviction.progress.bound + 1)
        await asyncio.sleep(2 * PING_S)
        assert not await pings.grows(), "a wedged eviction pass stops the agent's pings"
        assert list(agent.progress.problems()) == ["eviction"]
        stuck.set()
        assert await pings.grows()
        with agent.steps.step("pod default/web: remove its cgroups", 30):
            clock.advance(31)
            assert list(agent.progress.problems()) == ["pods"]
            await asyncio.sleep(2 * PING_S)
            assert not await pings.grows(), "an overdue pod step stops the agent's pings"
        assert await pings.grows()
    finally:
        await agent.tasks.close()
