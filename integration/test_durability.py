"""The agent's promises under SIGKILL, on a real kernel (as root): the real agent is killed at the
instants that would break them (NODEAGENT_FAULT fault points, daemonkit/faults.py) and at random
instants of a small storm, then restarted; plus a full stateDir and a corrupted checkpoint.

Host (cgroup v1):      .venv/bin/pytest integration/test_durability.py -q
UML guest (pure v2):   integration/run-in-uml.sh .venv/bin/pytest integration/test_durability.py -q

Every pod writes its shell's PID to a file of its own before it execs, so a container started
twice shows as two lines. The issue's 50 pods / 20 kills storm is bench/kill_storm.py; the one
here is small enough to take seconds.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentProcess, pod_manifest, poll_until, running_pid
from kernel_view import is_running

SLEEP = "exec sleep 100000"


@pytest.fixture
def make_agent(tmp_path: Path, cgroup_version: int) -> Iterator[Callable[..., AgentProcess]]:
    agents: list[AgentProcess] = []

    def make(fault: str | None = None, workdir: Path | None = None) -> AgentProcess:
        wd = workdir or tmp_path / f"agent{len(agents)}"
        wd.mkdir(exist_ok=True)
        agent = AgentProcess(wd, cgroup_version)
        agents.append(agent)
        agent.start(fault)
        return agent

    yield make
    errors = []
    for agent in agents:
        try:
            agent.cleanup()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


def marked(name: str, runs: Path, script: str = SLEEP, **kw: Any) -> dict[str, Any]:
    """A pod whose every start appends its PID to runs/<name>."""
    # "$$" is Kubernetes' escape of "$" ($(VAR) expansion): the shell sees "$$"
    return pod_manifest(name, f"echo $$$$ >> {runs / name}; {script}", uid=str(uuid.uuid4()), **kw)


def starts(runs: Path, name: str) -> list[int]:
    try:
        return [int(x) for x in (runs / name).read_text().split()]
    except FileNotFoundError:
        return []


def started_once(runs: Path, name: str, pid: int) -> list[int]:
    """The pod's start lines once its running shell has written its own (Running is reported
    when the shim is in its cgroup, a moment before the shell's echo)."""
    poll_until(lambda: pid in starts(runs, name), 30, f"{name}'s start line {pid}")
    return starts(runs, name)


def try_request(fn: Callable[[], tuple[int, Any]]) -> int | None:
    """The status, or None when the agent died before answering."""
    try:
        return fn()[0]
    except OSError:
        return None


def killed_itself(agent: AgentProcess) -> None:
    assert agent.proc is not None
    code = agent.proc.wait(30)
    assert code == -signal.SIGKILL, f"the agent exited with {code}, not at its fault point:\n{agent.log_tail()}"


# ---- each fault point of a create ----


@pytest.mark.parametrize("point", ["create-after-commit", "before-spawn", "after-spawn"])
def test_a_create_survives_a_kill_at_each_point_and_runs_once(make_agent: Callable[..., AgentProcess],
                                                              tmp_path: Path, point: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    agent = make_agent(fault=point)
    answer = try_request(lambda: agent.create(marked("p", runs)))
    killed_itself(agent)
    if point == "create-after-commit":
        assert answer is None, "killed after the fsync, before the answer"
    agent.start()
    pid, _ = agent.wait_running("p")
    pod = agent.pod("p")
    assert pod is not None and pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert started_once(runs, "p", pid) == [pid], f"started {starts(runs, 'p')}, running {pid} (answer {answer})"
    uid = pod["metadata"]["uid"]
    assert pid in agent.cg.pids(f"kubepods/besteffort/pod{uid}/main")


# ---- a delete: recorded before its 200, carried on by the next agent ----


@pytest.mark.parametrize("point", ["delete-after-commit", "stop-mid-grace"])
def test_a_delete_is_carried_on_after_a_kill(make_agent: Callable[..., AgentProcess], tmp_path: Path,
                                             point: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    agent = make_agent(fault=point)
    trapped = runs / "d.trapped"
    agent.create_ok(marked("d", runs, f"trap '' TERM; touch {trapped}; while :; do sleep 0.1; done"))
    pid, start = agent.wait_running("d")
    poll_until(trapped.exists, 30, "the trap to be set (Running comes a moment before the shell runs)")
    uid = agent.pod("d")["metadata"]["uid"]  # type: ignore[index]
    t0 = time.monotonic()
    answer = try_request(lambda: agent.delete("d", grace=3))
    killed_itself(agent)
    assert is_running(pid, start), "SIGTERM is trapped: it runs on while no agent watches"
    agent.start()
    poll_until(lambda: not is_running(pid, start), 30, "the kill at the recorded deadline")
    assert time.monotonic() - t0 >= 2.9, "the grace period was cut short"
    poll_until(lambda: agent.pod("d") is None, 30, "the pod to be removed")
    assert not agent.cg.exists(f"kubepods/besteffort/pod{uid}")
    assert starts(runs, "d") == [pid], f"started again after the delete (answer {answer})"


# ---- a small storm of SIGKILLs at random instants ----


def test_a_kill_storm_loses_no_acknowledged_pod_and_brings_no_deleted_one_back(
        make_agent: Callable[..., AgentProcess], tmp_path: Path) -> None:
    rng = random.Random(11)
    runs = tmp_path / "runs"
    runs.mkdir()
    agent = make_agent()
    created: set[str] = set()  # answered 201
    deleted: set[str] = set()  # answered 200
    lock = threading.Lock()
    n = 0
    kills = 4
    for _ in range(kills):
        names = [f"s{n + i}" for i in range(4)]
        n += 4
        victims = rng.sample(sorted(created - deleted), min(2, len(created - deleted)))

        def create(name: str) -> None:
            if try_request(lambda: agent.create(marked(name, runs))) == 201:
                with lock:
                    created.add(name)

        def delete(name: str) -> None:
            if try_request(lambda: agent.delete(name, grace=0)) == 200:
                with lock:
                    deleted.add(name)

        assert agent.proc is not None
        killer = threading.Timer(rng.uniform(0.0, 0.4), agent.proc.send_signal, (signal.SIGKILL,))
        killer.start()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, names))
            list(pool.map(delete, victims))
        killer.join()
        agent.proc.wait(30)
        agent.start()
        present = {p["metadata"]["name"] for p in agent.pods()}
        lost = (created - deleted) - present
        assert not lost, f"acknowledged pods lost: {sorted(lost)}"
        for name in deleted:
            poll_until(lambda name=name: agent.pod(name) is None, 30, f"deleted {name} to stay gone")
        twice = {name: starts(runs, name) for name in present if len(starts(runs, name)) > 1}
        assert not twice, f"started twice: {twice}"
    for name in sorted(created - deleted):
        agent.wait_running(name)
    assert len(created) >= 4, f"too few creates answered to mean anything: {sorted(created)}"


# ---- a full stateDir: a clear 500, nothing half-made ----


def test_a_full_state_dir_refuses_a_create_with_a_500_and_leaves_nothing(tmp_path: Path,
                                                                        cgroup_version: int) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    workdir = tmp_path / "agent"
    state = workdir / "state"
    state.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state)], check=True)
    agent = AgentProcess(workdir, cgroup_version)
    try:
        agent.start()
        agent.create_ok(marked("first", runs))
        # running, and its shell past the echo, before the disk fills: its log file is on stateDir
        first, _ = agent.wait_running("first")
        assert started_once(runs, "first", first) == [first]
        filler = state / "filler"
        with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        # the journal's last page may still hold a record or two: those creates are durable (201)
        for i in range(20):
            manifest = marked(f"full{i}", runs)
            status, body = agent.create(manifest)
            if status != 201:
                break
        assert status == 500, (status, body)
        name = manifest["metadata"]["name"]
        assert body["reason"] == "InternalError" and "No space left on device" in body["message"], body
        assert f"cannot record pod default/{name}" in body["message"], body
        assert agent.pod(name) is None
        assert not agent.cg.exists(f"kubepods/besteffort/pod{manifest['metadata']['uid']}"), "a cgroup was made"
        assert starts(runs, name) == [], "it ran"
        filler.unlink()
        assert agent.wait_running("first")[0] == first, "the running pod was disturbed by the full disk"
        agent.create_ok(marked(name, runs))
        assert starts(runs, "first") == [first]
        agent.wait_running(name)
    finally:
        try:
            (state / "filler").unlink(missing_ok=True)
            agent.cleanup()
        finally:
            subprocess.run(["umount", str(state)], check=True)


# ---- a corrupted checkpoint: moved aside, reported, the others untouched ----


def test_a_corrupted_checkpoint_is_moved_aside_and_reported(make_agent: Callable[..., AgentProcess],
                                                            tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    agent = make_agent()
    agent.create_ok(marked("good", runs))
    agent.create_ok(marked("bad", runs))
    good = agent.wait_running("good")
    agent.wait_running("bad")
    agent.stop()
    agent.start()  # the journal is compacted into the per-pod files at load
    agent.stop()
    path = agent.state_dir / "checkpoints" / "default_bad.json"
    path.write_bytes(path.read_bytes()[:-20] + b"garbage")
    journal = path.parent / "journal.log"  # the records the stop wrote after the files: corrupt bad's too
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join(line.replace(b'"name":"bad"', b'"name":"bax"') if b'"name":"bad"' in line
                                    else line for line in lines))
    agent.start()
    assert running_pid(agent.pod("good")) == good, "the other pod was disturbed"
    assert agent.pod("bad") is None
    assert list(path.parent.glob("default_bad.json.corrupt-*")), "not moved aside"
    note = agent.node()["metadata"]["annotations"]["nodeagent.io/checkpoint-problems"]
    assert "default_bad.json" in note
    status, text = agent.request("GET", "/metrics")
    value = next(float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("nodeagent_checkpoint_problems "))
    assert status == 200 and value == note.count("\n") + 1 >= 1, (value, note)
