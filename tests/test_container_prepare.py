"""ContainerWorker's `prepare` step (runtime/supervisor.py), what an image container pulls and
builds its bundle in: awaited before every start, its Waiting states reported, cancelled by a
stop (nothing starts then), an error in it a StartError exit under the restart policy. Real short
processes through the spawn shim."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.agent.runtime.state import REASON_START_ERROR, Running, Terminated, Waiting
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker


def config(tmp_path: Path, argv: tuple[str, ...], policy: str = "Never") -> ContainerConfig:
    return ContainerConfig(name="c", launch=LaunchSpec(argv), log_dir=str(tmp_path / "logs"), restart_policy=policy,
                           pod_name="p")


async def test_prepare_runs_before_every_start_and_its_states_are_the_containers(tmp_path: Path) -> None:
    calls: list[int] = []
    seen: list[str] = []

    async def prepare(waiting: Callable[[Waiting], None]) -> None:
        calls.append(len(calls))
        waiting(Waiting("ErrImagePull", "try again"))
        await asyncio.sleep(0.01)

    w = ContainerWorker(config(tmp_path, ("sh", "-c", "exit 3"), "OnFailure"), prepare=prepare,
                        backoff=CrashBackoff(initial=0.01, maximum=0.02),
                        on_change=lambda st: seen.append(getattr(st.state, "reason", type(st.state).__name__)))
    task = asyncio.create_task(w.run())
    while w.status.restart_count < 2:
        await asyncio.sleep(0.01)
    await w.stop(0)
    await task
    assert len(calls) >= 3  # the first start and each restart
    assert seen[0] == "ErrImagePull" and "Error" in seen  # waiting, then the exit of the run it prepared


async def test_a_stop_during_prepare_cancels_it_and_nothing_starts(tmp_path: Path) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def prepare(waiting: Callable[[Waiting], None]) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    w = ContainerWorker(config(tmp_path, ("sleep", "30")), prepare=prepare)
    task = asyncio.create_task(w.run())
    await started.wait()
    await w.stop(0)
    assert await asyncio.wait_for(task, 5) is None
    assert cancelled.is_set() and w.pid is None and not isinstance(w.status.state, Running)


async def test_an_error_in_prepare_is_a_start_error(tmp_path: Path) -> None:
    async def prepare(waiting: Callable[[Waiting], None]) -> None:
        raise OSError(5, "mount failed")

    w = ContainerWorker(config(tmp_path, ("sleep", "30")), prepare=prepare)
    state = await asyncio.wait_for(w.run(), 5)
    assert isinstance(state, Terminated) and state.reason == REASON_START_ERROR and "mount failed" in state.message
