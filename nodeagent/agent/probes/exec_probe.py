"""Run a command inside a container as an exec probe or hook does: its cgroup, env, identity.

The command is started through the container spawn shim (runtime/spawn.py), so it joins the
container's cgroup(s) and takes its oom_score_adj before it execs: it is accounted to, and
limited with, the container. Its stdout and stderr go to a pipe the agent reads on the event
loop (the shim's log "file" is the pipe's write end, opened by the child through
/proc/self/fd/N before it execs), keeping the first 10 KiB as the kubelet does. The exit is
seen through a pidfd on the loop: nothing blocks and no thread is involved. An exec probe
registers neither: its pipe and its exit are looked at on the probes' grid (poller.py), where
its timeout is checked too.

In a container from an image the shim starts the OCI runtime's `exec` instead (`runc exec
--pid-file F ID cmd...`, charged to the pod's sandbox cgroup), which runs the command in the
container's namespaces, rootfs and cgroup with its process spec; its stdio is the same pipe.
exec_launch() is where a target becomes what is spawned, for probes, hooks and `kubectl exec`.

Timeout: the process group is SIGKILLed (and, through a runtime, the exec'd process its pid file
names: it is not the runtime's child once inside the container) and the result is the kubelet's
`command "..." timed out`. Until the runtime has written the pid file (runc writes it once the
process runs, which takes seconds on a slow node) the runtime is left alive and the file read again
every 50 ms, for at most 5 s: killing the runtime first would leave the command running in the
container. Cancellation (the prober stopping)
kills it the same way and reaps it in the background. Processes that left the group (setsid)
are not chased: they live in the container's cgroup, which the container's own end cleans up.
A shim that could not set the command up (exit 125, e.g. the cgroup is gone) means the probe
could not run: Verdict.UNKNOWN, not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from nodeagent.agent.probes.poller import poller, until
from nodeagent.agent.probes.results import MAX_OUTPUT, ProbeOutcome, failure, success, unknown
from nodeagent.agent.runtime.cgroup_handle import CgroupHandle
from nodeagent.agent.runtime.exec_session import KILL_RETRY_S, KILL_TRIES
from nodeagent.agent.runtime.oci.runtime import OciExec
from nodeagent.agent.runtime.spawn import SETUP_FAILED, LaunchSpec, Spawned, spawn_unidentified
from nodeagent.agent.runtime.state import reap_exit_code
from nodeagent.core.names import quote

log = structlog.get_logger(__name__)

Spawner = Callable[[LaunchSpec, str, Sequence[str], "int | None"], Spawned]


@dataclass(frozen=True)
class ExecTarget:
    """The container an exec runs in. `oci` set: an image container, reached only through its
    runtime's `exec` (probes, hooks, `kubectl exec`); the runtime's process is spawned in `cgroup`
    (the pod's sandbox, where it is charged) and the other fields are left empty: the container's
    process spec (env, working directory, user) is the runtime's to apply."""

    cgroup: CgroupHandle | None
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    run_as_user: int | None = None
    run_as_group: int | None = None
    oom_score_adj: int | None = None
    oci: OciExec | None = None


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None when it timed out
    output: bytes
    timed_out: bool = False


class _Running:
    """One spawned exec: its pidfd and output pipe, watched on the loop (`watch`), or looked at
    by `poll` on the probes' grid (exec probes: no registration, no wake-up of their own)."""

    def __init__(self, pid: int, pidfd: int, read_fd: int, on_kill: Callable[[], bool], *, watch: bool = True,
                 deadline: float | None = None) -> None:
        self.pid = pid
        self.on_kill = on_kill  # False: the process to kill is not known yet (ask again)
        self.kill_tries = 0
        self.pidfd = pidfd
        self.read_fd = read_fd
        self.output = bytearray()
        self.timed_out = False
        self.deadline = deadline  # polled: the loop time at which `poll` kills it
        self.watched = watch
        self.loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[int] = self.loop.create_future()
        if watch:
            self.loop.add_reader(read_fd, self._on_readable)
            self.loop.add_reader(pidfd, self._reap)

    def poll(self) -> bool:
        """Read what the pipe holds (a chatty child never fills it), kill it past its deadline,
        reap it if it has ended: True once it has."""
        self._drain()
        if self.deadline is not None and not self.timed_out and self.loop.time() >= self.deadline:
            self.time_out()
        if self.pidfd >= 0:
            self._reap()
        return self.exited.done()

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self.read_fd >= 0:
                self._read()

    def _read(self) -> None:
        try:
            data = os.read(self.read_fd, 65536)
        except BlockingIOError:
            raise  # nothing more for now: the caller's to know
        except OSError:
            data = b""
        if not data:
            self._close_pipe()
            return
        room = MAX_OUTPUT - len(self.output)
        if room > 0:
            self.output += data[:room]

    def _on_readable(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._read()

    def _close_pipe(self) -> None:
        if self.read_fd >= 0:
            if self.watched:
                self.loop.remove_reader(self.read_fd)
            os.close(self.read_fd)
            self.read_fd = -1

    def _reap(self) -> None:
        code = reap_exit_code(self.pid)
        if code is None:
            return
        if self.watched:
            self.loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        if self.read_fd >= 0:  # what is already in the pipe; not waiting for EOF (a child may hold it)
            with contextlib.suppress(BlockingIOError, OSError):
                while self.read_fd >= 0 and len(self.output) < MAX_OUTPUT:
                    chunk = os.read(self.read_fd, 65536)
                    if not chunk:
                        break
                    self.output += chunk[: MAX_OUTPUT - len(self.output)]
            self._close_pipe()
        if not self.exited.done():
            self.exited.set_result(code)

    def time_out(self) -> None:
        self.timed_out = True
        self.kill()

    def kill(self) -> None:
        if self.pidfd < 0:
            return
        if not self.on_kill() and self.kill_tries < KILL_TRIES:
            # the runtime has started the command but not said which process it is: the runtime
            # is kept alive (killing it would leave the command running in the container) and
            # asked again shortly
            self.kill_tries += 1
            self.loop.call_later(KILL_RETRY_S, self.kill)
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.killpg(self.pid, signal.SIGKILL)


@dataclass(frozen=True)
class ExecLaunch:
    """How a command starts in a target's container, for a probe, a hook or `kubectl exec` alike:
    what the spawn shim runs (the command itself, or the OCI runtime's `exec` of it), the cgroups
    it joins first and its oom_score_adj. Through a runtime, killing the `exec` leaves the command
    running inside the container: `kill_exec` kills what its pid file names."""

    spec: LaunchSpec
    procs_files: list[str]
    oom_score_adj: int | None
    oci: OciExec | None = None
    pid_file: str | None = None

    def kill_exec(self) -> bool:
        """Kill what the runtime exec'd; False while its pid file is not written yet."""
        if self.oci is not None and self.pid_file is not None:
            return self.oci.kill(self.pid_file)
        return True

    def release(self) -> None:
        """After the end: the runtime's pid file goes."""
        if self.pid_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.pid_file)


def exec_launch(command: Sequence[str], target: ExecTarget, *, tty: bool = False) -> ExecLaunch:
    """The one place a target becomes a launch (ValueError: no command)."""
    files = target.cgroup.procs_files() if target.cgroup is not None else []
    if target.oci is not None:
        pid_file = target.oci.pid_file()
        return ExecLaunch(target.oci.launch(command, tty=tty, pid_file=pid_file), files, target.oom_score_adj,
                          target.oci, pid_file)
    spec = LaunchSpec(tuple(command), dict(target.env), target.working_dir, target.run_as_user,
                      target.run_as_group)
    return ExecLaunch(spec, files, target.oom_score_adj)


async def run_in_container(
    command: Sequence[str], target: ExecTarget, timeout_seconds: float | None, *, spawner: Spawner = spawn_unidentified,
    polled: bool = False,
) -> ExecResult:
    """Run `command` in the container; returns its exit code and first 10 KiB of output. `polled`
    (exec probes): its end is looked for on the probes' grid (poller.py), and its timeout there.

    OSError / ValueError if it cannot be started at all.
    """
    launch = exec_launch(command, target)
    try:
        return await _run(launch, timeout_seconds, spawner, polled)
    finally:
        launch.release()


async def _run(launch: ExecLaunch, timeout_seconds: float | None, spawner: Spawner, polled: bool) -> ExecResult:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        try:
            spawned = spawner(launch.spec, f"/proc/self/fd/{write_fd}", launch.procs_files, launch.oom_score_adj)
        finally:
            os.close(write_fd)
        pidfd = os.pidfd_open(spawned.pid)
    except BaseException:
        os.close(read_fd)
        raise
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds if polled and timeout_seconds is not None else None
    proc = _Running(spawned.pid, pidfd, read_fd, launch.kill_exec, watch=not polled, deadline=deadline)
    timer = loop.call_later(timeout_seconds, proc.time_out) if timeout_seconds is not None and not polled else None
    try:
        if polled:
            await until(proc.poll)
        code = await proc.exited  # a timeout kills the process, and the exit follows
    except asyncio.CancelledError:
        proc.kill()  # _reap still runs when it dies and closes both descriptors
        if polled:
            poller().wait(proc.poll)  # looked at on the grid until it is reaped; nobody awaits it
        raise
    finally:
        if timer is not None:
            timer.cancel()
    return ExecResult(None if proc.timed_out else code, bytes(proc.output), timed_out=proc.timed_out)


KNOWN_POLL_S = 0.02


async def runtime_knows(target: ExecTarget, within: float) -> bool:
    """Whether the OCI runtime knows the container within `within` seconds (at once for a host
    process). An image container is Running once its process is in its cgroup, which can be a
    moment before the runtime has written its state; an exec then fails with "container does not
    exist", which a probe must not count as the container's failure."""
    if target.oci is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not target.oci.known():  # a stat: cheap enough for the loop
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(KNOWN_POLL_S)
    return True


async def exec_probe(command: Sequence[str], target: ExecTarget, timeout_seconds: float, *,
                     spawner: Spawner = spawn_unidentified) -> ProbeOutcome:
    """The exec probe: exit 0 is success; any other exit a failure with the output. In an image
    container the runtime's knowing the container is waited for first, within the timeout; if it
    never comes the attempt is unknown (reported, not counted), not a failure."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    if not await runtime_knows(target, timeout_seconds):
        return unknown("the OCI runtime does not know the container yet")
    left = max(0.0, timeout_seconds - (loop.time() - began))  # the wait is part of the probe's timeout
    try:
        res = await run_in_container(command, target, left, spawner=spawner, polled=True)
    except (OSError, ValueError) as e:
        return unknown(f"cannot start {list(command)}: {e}")
    text = res.output.decode("utf-8", "replace")
    if res.timed_out:
        return failure(f"command {quote(' '.join(command))} timed out")
    if res.exit_code == 0:
        return success(text)
    if res.exit_code == SETUP_FAILED and text.startswith("nodeagent-shim:"):
        return unknown(text.strip())
    return failure(text)
