"""`kubectl exec` into an image container goes through the OCI runtime's exec (OciExec): its argv,
and the kill of the exec'd process its pid file names, only while it is in the container's cgroup."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.agent.probes.exec_probe import ExecTarget, exec_probe, run_in_container, runtime_knows
from nodeagent.agent.probes.results import Verdict
from nodeagent.agent.runtime.oci.runtime import BundleDirs, OciExec, OciRuntime
from nodeagent.agent.runtime.spawn import LaunchSpec, Spawned, spawn


def handle(tmp_path: Path, cgroup: str = "/kubepods/podX/main") -> OciExec:
    return OciRuntime("runc", "/usr/sbin/runc", "/state/runc").exec_handle("uid-main", BundleDirs(str(tmp_path)),
                                                                           cgroup)


def test_argv(tmp_path: Path) -> None:
    h = handle(tmp_path)
    pid_file = h.pid_file()
    assert pid_file.startswith(f"{tmp_path}/exec-") and pid_file.endswith(".pid") and pid_file != h.pid_file()
    assert h.argv(["sh", "-c", "id"], tty=False, pid_file=pid_file) == [
        "/usr/sbin/runc", "--root", "/state/runc", "exec", "--pid-file", pid_file, "uid-main", "sh", "-c", "id"]
    assert h.argv(["sh"], tty=True, pid_file=pid_file)[3:6] == ["exec", "--tty", "--pid-file"]
    with pytest.raises(ValueError, match="command: Required value"):
        h.argv([], tty=False, pid_file=pid_file)


def test_kill_only_a_process_of_the_container(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "exec.pid"
        pid_file.write_text(str(proc.pid))
        assert handle(tmp_path, "/no-such-cgroup-of-ours").kill(str(pid_file))  # not in the container's cgroup: kept
        assert proc.poll() is None
        own = Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()[-1].split(":", 2)[2]
        handle(tmp_path, own).kill(str(pid_file))
        assert proc.wait(5) == -9
        assert handle(tmp_path, own).kill(str(pid_file))  # gone: nothing happens, nothing to wait for
        # not written yet (the runtime writes it once the process runs): the caller asks again
        assert not handle(tmp_path, own).kill(str(tmp_path / "missing.pid"))
        (tmp_path / "empty.pid").write_text("")
        assert not handle(tmp_path, own).kill(str(tmp_path / "empty.pid"))
    finally:
        proc.kill()
        proc.wait()


async def test_a_timeout_waits_for_the_pid_file_then_kills_the_execd_process(tmp_path: Path) -> None:
    """The runtime (here a shell standing in for `runc exec`) writes the pid file 0.3 s after the
    exec's 0.1 s timeout: it is kept alive until then (killing it first would leave the command
    running inside the container), then the process the file names is killed."""
    own = Path("/proc/self/cgroup").read_text().splitlines()[-1].split(":", 2)[2]
    target = ExecTarget(cgroup=None, oci=handle(tmp_path, own))
    script = 'sleep 0.3; sleep 60 & echo $! > "$1.seen"; echo $! > "$1"; wait'

    def runtime(spec: LaunchSpec, log: str, files: Sequence[str], adj: int | None) -> Spawned:
        pid_file = spec.argv[spec.argv.index("--pid-file") + 1]
        return spawn(LaunchSpec(("/bin/sh", "-c", script, "sh", pid_file)), log, files, adj)

    t0 = time.monotonic()
    res = await run_in_container(["true"], target, 0.1, spawner=runtime)
    assert res.timed_out and time.monotonic() - t0 >= 0.3  # the runtime outlived the timeout
    (seen,) = tmp_path.glob("exec-*.pid.seen")
    assert not list(tmp_path.glob("exec-*.pid"))  # released

    def dead() -> bool:
        try:
            return Path(f"/proc/{int(seen.read_text())}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 5
    while not dead() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert dead()


async def test_a_probe_waits_for_the_runtime_to_know_the_container(tmp_path: Path) -> None:
    """Running can come a moment before the runtime's state.json (an exec would fail with
    "container does not exist"): the probe waits for it within its timeout, and without it the
    attempt is unknown, never a failure that counts toward a liveness restart."""
    root = tmp_path / "root"
    h = OciRuntime("runc", "/bin/true", str(root)).exec_handle("uid-main", BundleDirs(str(tmp_path)), "/x")
    target = ExecTarget(cgroup=None, oci=h)
    assert not await runtime_knows(target, 0.05)
    outcome = await exec_probe(["cat", "/healthy"], target, 0.05)
    assert outcome.verdict is Verdict.UNKNOWN and "does not know the container" in outcome.output

    async def write_state() -> None:
        await asyncio.sleep(0.1)
        (root / "uid-main").mkdir(parents=True)
        (root / "uid-main" / "state.json").write_text("{}")

    writer = asyncio.create_task(write_state())
    t0 = time.monotonic()
    assert await runtime_knows(target, 5)
    assert 0.1 <= time.monotonic() - t0 < 2
    await writer
    assert await runtime_knows(ExecTarget(cgroup=None), 0)  # a host process: at once
