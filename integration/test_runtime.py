"""The process runtime against the real kernel: host cgroup v1, real processes, real OOM kills.

Needs root and the v1 memory and cpu hierarchies. Every cgroup used here is created under
/sys/fs/cgroup/{memory,cpu}/nodeagent-rt-<random> and removed afterwards; only PIDs these tests
started are ever signalled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent.node.procfs import has_cap_sys_resource, is_same_process, process_start_time
from nodeagent.agent.runtime import logs
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.cgroup_handle import CgroupHandle
from nodeagent.agent.runtime.spawn import (
    SETUP_FAILED,
    LaunchSpec,
    clamp_oom_score_adj,
    spawn,
)
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, Waiting
from nodeagent.agent.runtime.supervisor import ContainerConfig, ContainerWorker

MEM_ROOT = "/sys/fs/cgroup/memory"
CPU_ROOT = "/sys/fs/cgroup/cpu"

pytestmark = [
    pytest.mark.cgroup_v1,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (writes cgroup.procs, switches users)"),
    pytest.mark.skipif(
        not (os.path.isfile(f"{MEM_ROOT}/cgroup.procs") and os.path.isfile(f"{CPU_ROOT}/cgroup.procs")),
        reason="needs the cgroup v1 memory and cpu hierarchies",
    ),
]


class V1TestCgroup:
    """A CgroupHandle over a memory and a cpu cgroup these tests made themselves."""

    def __init__(self, name: str) -> None:
        self.dirs = [f"{MEM_ROOT}/{name}", f"{CPU_ROOT}/{name}"]
        for d in self.dirs:
            os.mkdir(d)

    @property
    def mem(self) -> str:
        return self.dirs[0]

    def procs_files(self) -> list[str]:
        return [f"{d}/cgroup.procs" for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files():
            with open(f) as fh:
                out.update(int(x) for x in fh.read().split())
        return out

    def kill(self) -> None:
        deadline = time.monotonic() + 5
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def oom_kills(self) -> int:
        with open(f"{self.mem}/memory.oom_control") as f:
            for line in f:
                key, value = line.split()
                if key == "oom_kill":
                    return int(value)
        return 0

    def limit_memory(self, nbytes: int) -> None:
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            if os.path.exists(f"{self.mem}/{name}"):
                with open(f"{self.mem}/{name}", "w") as f:
                    f.write(str(nbytes))

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


@pytest.fixture
def cgroup() -> Iterator[V1TestCgroup]:
    cg = V1TestCgroup(f"nodeagent-rt-{uuid.uuid4().hex[:10]}")
    try:
        yield cg
    finally:
        cg.remove()


def cgroup_name(cg: V1TestCgroup) -> str:
    return "/" + os.path.basename(cg.mem)


def wait_exit(pid: int, timeout: float = 10) -> int:
    """Reap our child `pid`; returns its raw wait status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid:
            return status
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"pid {pid} did not exit in {timeout}s")


def read(path: str | Path) -> str:
    """A file's text; "" while it does not exist yet."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------- spawn

def test_the_command_starts_inside_its_cgroups_with_its_oom_score_adj(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    log = tmp_path / "0.log"
    # cat reads /proc/self of the very process the shim became: nothing ran in between.
    spec = LaunchSpec(("/bin/cat", "/proc/self/cgroup", "/proc/self/oom_score_adj"))
    sp = spawn(spec, str(log), cgroup.procs_files(), 537)
    status = wait_exit(sp.pid)
    assert os.WEXITSTATUS(status) == 0, read(log)
    out = read(log)
    name = cgroup_name(cgroup)
    assert f":memory:{name}\n" in out
    assert f":cpu:{name}\n" in out
    assert out.rstrip().splitlines()[-1] == "537"


def test_the_shell_pid_is_the_container_pid_and_start_time_identifies_it(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    log = tmp_path / "0.log"
    sp = spawn(LaunchSpec(("/bin/sh", "-c", 'echo "pid=$$"; sleep 5')), str(log), cgroup.procs_files(), 3)
    try:
        deadline = time.monotonic() + 5
        while "pid=" not in read(log) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f"pid={sp.pid}" in read(log)
        assert sp.pid in cgroup.pids()
        assert process_start_time(sp.pid) == sp.start_time
        assert is_same_process(sp.pid, sp.start_time)
        assert not is_same_process(sp.pid, sp.start_time + 1)
        assert os.getpgid(sp.pid) == sp.pid and os.getsid(sp.pid) == sp.pid
    finally:
        os.kill(sp.pid, signal.SIGKILL)
        wait_exit(sp.pid)
    assert process_start_time(sp.pid) is None
    assert not is_same_process(sp.pid, sp.start_time)


def test_run_as_user_and_group(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    cmd = ("/bin/sh", "-c", "id -u; id -g; id -G")
    log = tmp_path / "user.log"
    sp = spawn(LaunchSpec(cmd, run_as_user=65534), str(log), cgroup.procs_files(), 10)
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0, read(log)
    assert read(log).split() == ["65534", "65534", "65534"]  # group from /etc/passwd (nogroup)
    log2 = tmp_path / "group.log"
    sp = spawn(LaunchSpec(cmd, run_as_user=4242, run_as_group=4343), str(log2), cgroup.procs_files(), 10)
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0, read(log2)
    assert read(log2).split() == ["4242", "4343", "4343"]  # no supplementary groups kept


def test_env_is_the_containers_alone_and_cwd_applies(tmp_path: Path, cgroup: V1TestCgroup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_SHOULD_NOT_LEAK", "1")
    work = tmp_path / "work dir"
    work.mkdir()
    spec = LaunchSpec(
        ("/usr/bin/env",),
        env={"FOO": "bar baz", "PATH": "/usr/bin:/bin"},
        working_dir=str(work),
    )
    log = tmp_path / "env.log"
    sp = spawn(spec, str(log), cgroup.procs_files(), None)
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0, read(log)
    env = dict(line.split("=", 1) for line in read(log).splitlines())
    assert env.get("FOO") == "bar baz"
    assert "NODEAGENT_SHOULD_NOT_LEAK" not in env
    assert set(env) == {"FOO", "PATH"}, env  # not even the PWD/OLDPWD the shim's shell made
    log3 = tmp_path / "own.log"
    own = {"PWD": "/mine", "OLDPWD": "/older", "PATH": "/bin"}
    sp = spawn(LaunchSpec(("/usr/bin/env",), env=own, working_dir=str(work)), str(log3))
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0, read(log3)
    assert dict(line.split("=", 1) for line in read(log3).splitlines()) == own
    log2 = tmp_path / "pwd.log"
    sp = spawn(LaunchSpec(("/bin/pwd",), working_dir=str(work)), str(log2))
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0
    assert read(log2).strip() == str(work)


def test_arguments_are_never_interpreted_by_the_shim(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    marker = tmp_path / "pwned"
    nasty = [
        "it's",
        'say "hi"',
        f"$(touch {marker})",
        f"`touch {marker}`",
        "a b  c",
        "; touch " + str(marker),
        "$HOME $$ $1 ${PATH}",
        "--",
        "line1\nline2",
        "",
    ]
    log = tmp_path / "args.log"
    sp = spawn(LaunchSpec(("/usr/bin/printf", "[%s]\n", *nasty)), str(log), cgroup.procs_files(), 5)
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0, read(log)
    assert read(log) == "".join(f"[{a}]\n" for a in nasty)
    assert not marker.exists()
    # a working directory and a cgroup path with shell metacharacters are data too
    odd = tmp_path / "$(touch x); 'q'"
    odd.mkdir()
    sp = spawn(LaunchSpec(("/bin/pwd",), working_dir=str(odd)), str(tmp_path / "odd.log"), cgroup.procs_files())
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0
    assert read(tmp_path / "odd.log").strip() == str(odd)


def test_failing_to_join_a_cgroup_never_runs_the_command(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    marker = tmp_path / "ran"
    missing = f"{cgroup.mem}/no-such-child/cgroup.procs"
    log = tmp_path / "fail.log"
    sp = spawn(LaunchSpec(("/usr/bin/touch", str(marker))), str(log), [cgroup.procs_files()[1], missing], 5)
    status = wait_exit(sp.pid)
    assert os.WEXITSTATUS(status) == SETUP_FAILED == 125
    assert not marker.exists()
    assert "nodeagent-shim: cannot join cgroup" in read(log)


def test_an_oom_score_adj_that_cannot_be_set_never_runs_the_command(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    marker = tmp_path / "ran"
    log = tmp_path / "adj.log"
    sp = spawn(LaunchSpec(("/usr/bin/touch", str(marker))), str(log), cgroup.procs_files(), -998)
    status = wait_exit(sp.pid)
    if has_cap_sys_resource():  # lowering is allowed here: the command runs with -998
        assert os.WEXITSTATUS(status) == 0 and marker.exists()
    else:  # this machine's bounding set lacks CAP_SYS_RESOURCE: setup must fail, command not run
        assert os.WEXITSTATUS(status) == SETUP_FAILED
        assert not marker.exists()
        assert "nodeagent-shim: cannot set oom_score_adj -998" in read(log)
        assert clamp_oom_score_adj(-998) >= int(read("/proc/self/oom_score_adj"))
    assert clamp_oom_score_adj(500) == 500


def test_missing_command_and_missing_log_dir(tmp_path: Path) -> None:
    log = tmp_path / "nf.log"
    sp = spawn(LaunchSpec(("/no/such/binary",)), str(log))
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 127
    sp = spawn(LaunchSpec(("/no/such/binary",), run_as_user=65534), str(tmp_path / "nf2.log"))
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 127  # setpriv keeps the convention
    with pytest.raises(FileNotFoundError):
        spawn(LaunchSpec(("/bin/true",)), str(tmp_path / "no-dir" / "0.log"))


def test_sigpipe_is_default_in_the_container(tmp_path: Path) -> None:
    """Python ignores SIGPIPE; a container must not inherit that (yes | head must end)."""
    log = tmp_path / "pipe.log"
    sp = spawn(LaunchSpec(("/bin/sh", "-c", "yes | head -n 2; grep SigIgn /proc/self/status")), str(log))
    assert os.WEXITSTATUS(wait_exit(sp.pid)) == 0
    lines = read(log).splitlines()
    assert lines[:2] == ["y", "y"]
    ignored = int(lines[2].split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))


# ---------------------------------------------------------------- supervisor

def make_worker(
    tmp_path: Path,
    cg: CgroupHandle | None,
    argv: tuple[str, ...] | LaunchSpec,
    policy: str = "Never",
    events: list[ContainerStatus] | None = None,
    backoff: CrashBackoff | None = None,
) -> ContainerWorker:
    cfg = ContainerConfig(
        name="app",
        launch=argv if isinstance(argv, LaunchSpec) else LaunchSpec(argv, working_dir=str(tmp_path)),
        log_dir=logs.container_log_dir(str(tmp_path / "state"), "default", "web", "u-1", "app"),
        restart_policy=policy,
        oom_score_adj=clamp_oom_score_adj(900),
        pod_name="web",
        pod_namespace="default",
        pod_uid="u-1",
    )
    return ContainerWorker(
        cfg,
        cg,
        backoff=backoff or CrashBackoff(initial=0.05, maximum=0.2),
        on_change=events.append if events is not None else None,
    )


async def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_graceful_stop_sends_sigterm_first(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    script = 'trap "echo got-term; exit 0" TERM; echo ready; while :; do sleep 0.05; done'
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", script), policy="Always")
    task = asyncio.create_task(w.run())
    await wait_for(lambda: "ready" in read(w.log_path))
    # the command can print before the worker's task has recorded the start it just made
    await wait_for(lambda: isinstance(w.status.state, Running) and w.status.ready)
    pid = w.pid
    t0 = time.monotonic()
    final = await w.stop(grace_period=10)
    assert time.monotonic() - t0 < 5  # it exited on SIGTERM, long before the grace period
    assert await asyncio.wait_for(task, 5) == final.state
    assert "got-term" in read(w.log_path)
    assert isinstance(final.state, Terminated)
    assert (final.state.exit_code, final.state.reason) == (0, "Completed")
    assert final.restart_count == 0  # Always, but stopped: no restart
    assert not cgroup.pids()
    assert pid is not None and process_start_time(pid) is None


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    # the ignore is inherited by sleep too; a setsid'd grandchild escapes the process group
    script = "trap '' TERM; setsid sleep 300 & echo ready; while :; do sleep 0.05; done"
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", script))
    task = asyncio.create_task(w.run())
    await wait_for(lambda: "ready" in read(w.log_path))
    await wait_for(lambda: len(cgroup.pids()) >= 2)
    t0 = time.monotonic()
    final = await w.stop(grace_period=0.6)
    elapsed = time.monotonic() - t0
    await asyncio.wait_for(task, 5)
    assert 0.6 <= elapsed < 5
    assert isinstance(final.state, Terminated)
    assert (final.state.exit_code, final.state.signal, final.state.reason) == (137, 9, "Error")
    assert not cgroup.pids()  # the escaped grandchild went with the cgroup


async def test_restart_policy_never(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", "echo once; exit 3"), policy="Never")
    final = await asyncio.wait_for(w.run(), 10)
    assert final is not None and (final.exit_code, final.reason) == (3, "Error")
    assert w.status.restart_count == 0 and w.status.state == final
    assert read(w.log_path) == "once\n"


async def test_restart_policy_on_failure_until_success(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    counter = tmp_path / "n"
    script = f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo run $n; [ $n -ge 3 ]'
    events: list[ContainerStatus] = []
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", script), policy="OnFailure", events=events)
    final = await asyncio.wait_for(w.run(), 10)
    assert final is not None and (final.exit_code, final.reason) == (0, "Completed")
    assert w.status.restart_count == 2
    assert w.status.last_state is not None and w.status.last_state.exit_code == 1
    loops = [e.state for e in events if isinstance(e.state, Waiting) and e.state.reason == "CrashLoopBackOff"]
    assert loops and loops[0].message == "back-off 50ms restarting failed container=app pod=web_default(u-1)"
    # one log file per run; older than the previous run are pruned
    assert read(w.log_path) == "run 3\n"
    assert read(logs.run_log_path(w.config.log_dir, 1)) == "run 2\n"
    assert not os.path.exists(logs.run_log_path(w.config.log_dir, 0))


async def test_restart_policy_always_restarts_successes_too(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    events: list[ContainerStatus] = []
    w = make_worker(tmp_path, cgroup, ("/bin/true",), policy="Always", events=events)
    task = asyncio.create_task(w.run())
    await wait_for(lambda: w.status.restart_count >= 3)
    final = await w.stop(grace_period=1)
    await asyncio.wait_for(task, 5)
    assert isinstance(final.state, Terminated)
    messages = {e.state.message for e in events if isinstance(e.state, Waiting) and e.state.message}
    assert {"back-off 50ms restarting failed container=app pod=web_default(u-1)",
            "back-off 100ms restarting failed container=app pod=web_default(u-1)"} <= messages


async def test_oom_kill_is_reported_as_oomkilled(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    cgroup.limit_memory(32 * 1024 * 1024)
    hog = f"{sys.executable} -c \"x = b'a' * (256 * 1024 * 1024); print('survived')\""
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", f"exec {hog}"), policy="Never")
    final = await asyncio.wait_for(w.run(), 30)
    assert final is not None
    assert (final.exit_code, final.signal, final.reason) == (137, 9, "OOMKilled"), read(w.log_path)
    assert "survived" not in read(w.log_path)
    assert cgroup.oom_kills() >= 1


async def test_start_error_is_reported_and_backs_off(tmp_path: Path) -> None:
    class Broken:
        def procs_files(self) -> list[str]:
            raise FileNotFoundError("cgroup kubepods/x is gone")

        def kill(self) -> None:
            pass

        def oom_kills(self) -> int:
            return 0

    events: list[ContainerStatus] = []
    w = make_worker(tmp_path, Broken(), ("/bin/true",), policy="OnFailure", events=events)
    task = asyncio.create_task(w.run())
    await wait_for(lambda: w.status.restart_count >= 2)
    final = await w.stop(grace_period=0)
    await asyncio.wait_for(task, 5)
    assert isinstance(final.state, Terminated)
    assert (final.state.exit_code, final.state.reason) == (128, "StartError")
    assert "is gone" in final.state.message


async def test_adopt_a_process_that_is_not_our_child(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    # A process from "the previous agent": started by a shell that exits at once, so the
    # container is re-parented away from us, exactly as after an agent restart.
    out = subprocess.run(
        ["/bin/sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    pid = int(out.stdout)
    with open(cgroup.procs_files()[0], "w") as f:
        f.write(str(pid))
    start = process_start_time(pid)
    assert start is not None
    events: list[ContainerStatus] = []
    w = make_worker(tmp_path, cgroup, ("/bin/false",), policy="Never", events=events)
    assert w.adopt(pid, start, restart_count=4)
    assert isinstance(w.status.state, Running) and w.status.restart_count == 4
    assert abs(w.status.state.started_at - time.time()) < 60  # derived from /proc start time
    task = asyncio.create_task(w.run())
    await asyncio.sleep(0.05)
    assert not task.done()
    os.kill(pid, signal.SIGKILL)  # it dies while adopted: pidfd sees it, exit status unknowable
    final = await asyncio.wait_for(task, 10)
    assert final is not None and (final.exit_code, final.reason) == (137, "ContainerStatusUnknown")
    assert w.status.restart_count == 4


async def test_adopt_refuses_a_reused_pid(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", "echo restarted; sleep 300"), policy="OnFailure")
    me = os.getpid()
    assert not w.adopt(me, (process_start_time(me) or 0) + 1, started_at=time.time() - 60)
    assert isinstance(w.status.state, Terminated) and w.status.state.reason == "ContainerStatusUnknown"
    task = asyncio.create_task(w.run())  # unknown exit counts as failure: OnFailure restarts it
    await wait_for(lambda: isinstance(w.status.state, Running) and w.status.restart_count == 1)
    await wait_for(lambda: "restarted" in read(w.log_path))
    await w.stop(grace_period=0.2)
    await asyncio.wait_for(task, 5)


async def test_cancelling_run_leaves_the_process_alone(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    w = make_worker(tmp_path, cgroup, ("/bin/sh", "-c", "echo up; sleep 300"), policy="Always")
    task = asyncio.create_task(w.run())
    await wait_for(lambda: "up" in read(w.log_path))
    pid, start = w.pid, w.start_time
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pid is not None and start is not None and is_same_process(pid, start)
    w.detach()
    w2 = make_worker(tmp_path, cgroup, ("/bin/false",), policy="Never")
    assert w2.adopt(pid, start)
    task2 = asyncio.create_task(w2.run())
    final = await w2.stop(grace_period=2)
    await asyncio.wait_for(task2, 5)
    assert isinstance(final.state, Terminated) and final.state.exit_code == 143  # sleep died of SIGTERM


def test_log_rotation_on_a_live_writer(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    log = tmp_path / "0.log"
    n = 100000
    script = f'i=0; while [ $i -lt {n} ]; do echo "line-$i"; i=$((i+1)); done'
    sp = spawn(LaunchSpec(("/bin/sh", "-c", script)), str(log), cgroup.procs_files())
    rotations = 0
    while os.waitpid(sp.pid, os.WNOHANG) == (0, 0):
        rotations += logs.rotate(str(log), max_size=50_000, max_files=500)
        time.sleep(0.002)
    assert rotations >= 3
    files = [*reversed(logs.rotated_files(str(log))), str(log)]
    data = b"".join(Path(f).read_bytes() for f in files)
    assert b"\0" not in data
    numbers = [int(line.split(b"-")[1]) for line in data.splitlines()]
    assert numbers == sorted(set(numbers))  # in order, no duplicates
    assert numbers[-1] == n - 1
    probe = tmp_path / "probe.log"
    probe.write_bytes(b"x" * 20_000)
    logs.rotate(str(probe), max_size=10)
    if probe.stat().st_size > 0:  # the filesystem collapsed the head in place: nothing may be lost
        assert len(numbers) == n
    else:  # copy-truncate loses what lands between its last read and the truncate
        assert len(numbers) >= n * 0.95
    assert logs.tail(str(log), 1)[0] == f"line-{n - 1}"


async def test_with_the_real_v1_driver(tmp_path: Path) -> None:
    """The adapter over the project's CgroupV1Driver: join, OOM counter, kill, then removal."""
    from nodeagent.agent.cgroups.driver import CgroupSpec
    from nodeagent.agent.cgroups.v1 import CgroupV1Driver
    from nodeagent.agent.runtime.cgroup_handle import DriverCgroup

    driver = CgroupV1Driver(root=f"/nodeagent-rt-{uuid.uuid4().hex[:10]}")
    driver.create("pod1/app", CgroupSpec(memory_max=32 * 1024 * 1024, cpu_shares=512))
    try:
        handle = DriverCgroup(driver, "pod1/app")
        script = f"cat /proc/self/cgroup; exec {sys.executable} -c \"x = b'a' * (256 * 1024 * 1024)\""
        w = make_worker(tmp_path, handle, ("/bin/sh", "-c", script), policy="Never")
        final = await asyncio.wait_for(w.run(), 30)
        assert final is not None and final.reason == "OOMKilled", read(w.log_path)
        lines = read(w.log_path).splitlines()
        want = f"{driver.root}/pod1/app"
        assert any(line.endswith(f":memory:{want}") for line in lines), lines
        assert any(":cpu" in line and line.endswith(f":{want}") and "memory" not in line for line in lines), lines
        assert driver.pids("pod1/app") == []
    finally:
        driver.kill("")
        driver.remove("")  # "" is the test root itself, never a hierarchy root


async def test_a_manifest_container_runs_with_kubernetes_expansion(tmp_path: Path, cgroup: V1TestCgroup) -> None:
    """From parse_pod to a running process: $(VAR) in env/args, runAsUser, workingDir, containerStatus."""
    from nodeagent.core.model import parse_pod

    pod = parse_pod({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 65534},
            "containers": [{
                "name": "app",
                "command": ["/bin/sh", "-c"],
                "args": ["echo '$(GREETING) $$(GREETING) $(MISSING)'; echo \"$GREETING\"; id -u; pwd"],
                "env": [{"name": "WHO", "value": "world"}, {"name": "GREETING", "value": "hello $(WHO)"}],
                "workingDir": "/tmp",
            }],
        },
    })
    c = pod.spec.containers[0]
    spec = LaunchSpec.from_container(c, pod.spec.security_context)
    assert spec.env["GREETING"] == "hello world" and spec.env["PATH"] and spec.env["HOME"]
    w = make_worker(tmp_path, cgroup, spec, policy=pod.spec.restart_policy)
    final = await asyncio.wait_for(w.run(), 10)
    assert final is not None and final.reason == "Completed", read(w.log_path)
    assert read(w.log_path).splitlines() == ["hello world $(GREETING) $(MISSING)", "hello world", "65534", "/tmp"]
    d = w.status.to_status_dict()
    assert d["name"] == "app" and d["state"]["terminated"]["exitCode"] == 0  # type: ignore[index]
    assert d["restartCount"] == 0 and d["ready"] is False
