"""The sampler fed from a real PodManager the way the daemon is to wire it (see `targets_of`):
the targets name exactly the cgroups the pod workers created, the running containers' start
times and their log directories."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from fakes import FakeCgroupDriver

from nodeagent.agent.pods.checkpoint import CheckpointStore
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.worker import PodEnv
from nodeagent.agent.runtime.state import Running
from nodeagent.agent.stats.sampler import Sampler
from nodeagent.agent.stats.targets import PodTarget
from nodeagent.core.clock import SystemClock
from nodeagent.core.quantity import parse_quantity

GI = 1 << 30


def targets_of(manager: PodManager, state_dir: str) -> list[PodTarget]:
    """What the daemon hands the sampler every pass (on the loop: in-memory only)."""
    return manager.stats_targets()


async def test_targets_from_the_pod_manager(tmp_path: Path) -> None:
    driver = FakeCgroupDriver(usage_tree=str(tmp_path / "cgroupfs"))
    state = tmp_path / "state"
    env = PodEnv(driver=driver, state_dir=str(state), memory_capacity=4 * GI, clock=SystemClock())
    manager = PodManager(env, CheckpointStore.open(state), allocatable={"cpu": parse_quantity("2"),
                         "memory": parse_quantity("2Gi"), "pods": parse_quantity("10")},
                         enforced_allocatable=None, max_pods=10)
    manager.setup_cgroups()
    uid = str(uuid.uuid4())
    await manager.create_pod({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "app", "command": ["/bin/sh", "-c", "echo hello; exec sleep 30"],
                                 "resources": {"requests": {"memory": "16Mi"}, "limits": {"memory": "32Mi"}}}]},
    })
    try:
        worker = manager.pods[("default", "web")]
        deadline = time.monotonic() + 10
        log_path = Path(worker.workers["app"].log_path)
        while not isinstance(worker.workers["app"].status.state, Running) or not log_path.stat().st_size:
            assert time.monotonic() < deadline, "the container did not start and write its line"
            await asyncio.sleep(0.02)
        targets = targets_of(manager, str(state))
        (target,) = targets
        assert {target.cgroup, target.containers[0].cgroup} <= set(driver.specs)  # the cgroups the worker made
        for path in (target.cgroup, target.containers[0].cgroup, "kubepods"):
            driver.set_usage(path, cpu_usec=1000, memory=8 << 20)
        snap = Sampler(driver, lambda: targets, SystemClock(), node_name="n", nodefs_path=str(state)).sample(targets)
        (pod,) = snap.pods
        (app,) = pod.containers
        assert (pod.namespace, pod.name, pod.uid, app.name) == ("default", "web", uid, "app")
        state_ = worker.workers["app"].status.state
        assert isinstance(state_, Running) and app.start_time == state_.started_at
        assert pod.start_time == worker.start_time
        assert app.memory is not None and app.memory.available_bytes == (32 << 20) - (8 << 20)
        assert app.logs is not None and app.logs.used_bytes is not None and app.logs.used_bytes > 0  # "hello"
    finally:
        for w in list(manager.pods.values()):
            await manager.terminate(w, 0, remove=True)
