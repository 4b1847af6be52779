"""Honest status (runtime/spawn.py's ready pipe, supervisor.py): a real shim reports Running only
once it is in its cgroup.procs files with its oom_score_adj; one that cannot join is a StartError
naming the file."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from nodeagent.agent.node.procfs import process_start_time
from nodeagent.agent.runtime.spawn import LaunchSpec, spawn, spawn_unidentified
from nodeagent.agent.runtime.state import REASON_START_ERROR, Running, Terminated, Waiting
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker


class FileCgroup:
    """A CgroupHandle whose "cgroup.procs" are plain files: the shim's writes land there."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def procs_files(self) -> list[str]:
        return self.files

    def kill(self) -> None:
        pass

    def oom_kills(self) -> int:
        return 0


async def until(fn, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)
    return value


def config(tmp_path: Path, argv: tuple[str, ...], adj: int | None = 500) -> ContainerConfig:
    return ContainerConfig(name="c", launch=LaunchSpec(argv), log_dir=str(tmp_path / "logs"),
                           restart_policy="Never", oom_score_adj=adj, pod_name="p")


async def test_running_only_once_in_its_cgroup_with_its_oom_score_adj(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    seen: list[tuple[str, str, str]] = []  # (state, procs file, adj) at every status change

    def on_change(status) -> None:  # type: ignore[no-untyped-def]
        pid = w.pid
        adj = Path(f"/proc/{pid}/oom_score_adj").read_text().strip() if pid else ""
        seen.append((type(status.state).__name__, procs.read_text().strip(), adj))

    w = ContainerWorker(config(tmp_path, ("sleep", "30")), FileCgroup([str(procs)]), on_change=on_change)
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: isinstance(w.status.state, Running))
        pid = w.pid
        assert isinstance(seen[0], tuple) and seen[0][0] == "Waiting", seen
        running = [s for s in seen if s[0] == "Running"]
        assert running[0] == ("Running", str(pid), "500"), seen
        assert w.status.container_id.startswith(f"nodeagent://{pid}@")
    finally:
        await w.stop(0)
        await task


async def test_a_shim_that_cannot_join_its_cgroup_is_a_start_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone" / "cgroup.procs")
    w = ContainerWorker(config(tmp_path, ("sleep", "30")), FileCgroup([missing]))
    states = []
    w._on_change = lambda s: states.append(s.state)
    result = await asyncio.wait_for(w.run(), 10)
    assert isinstance(result, Terminated) and result.reason == REASON_START_ERROR
    assert result.message == f"nodeagent-shim: cannot join cgroup {missing}"
    assert not any(isinstance(s, Running) for s in states), "never reported running"
    assert isinstance(states[0], Waiting) and w.status.container_id == ""


def test_spawn_reads_the_start_time_and_spawn_unidentified_does_not(tmp_path: Path) -> None:
    """spawn_unidentified (exec probes, hooks) starts the same shim, in its cgroup files, and only
    skips reading /proc/<pid>/stat: the start time is 0; spawn's is the kernel's."""
    spec = LaunchSpec(("/bin/sh", "-c", "echo ran"), {"PATH": "/usr/bin:/bin"})
    for fn in (spawn, spawn_unidentified):
        procs, log = tmp_path / f"{fn.__name__}.procs", tmp_path / f"{fn.__name__}.log"
        procs.touch()
        sp = fn(spec, str(log), [str(procs)], None)
        start = process_start_time(sp.pid)
        _, status = os.waitpid(sp.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert log.read_text() == "ran\n" and procs.read_text().strip() == str(sp.pid)
        assert sp.start_time == (start if fn is spawn else 0) and start
