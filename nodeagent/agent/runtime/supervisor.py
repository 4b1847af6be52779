"""ContainerWorker: runs one container as a supervised host process (asyncio, no threads watching).

Watching: every live process has a pidfd (os.pidfd_open) registered with loop.add_reader; it
becomes readable when the process exits. For our own children the callback then reaps exactly
that PID with waitpid(WNOHANG) and decodes its status. A process adopted after an agent restart
is not our child: its pidfd still says when it exits, but its exit status is gone (its new
parent reaped it), so it is reported as the kubelet reports a container it lost: exitCode 137,
reason ContainerStatusUnknown (or OOMKilled, 137, SIGKILL when the cgroup's oom_kill counter
grew since adoption). Under OnFailure that counts as a failure, so the container is restarted.
No asyncio child watcher and no thread is involved in noticing exits.

Lifecycle: the owner (the daemon's pod worker) awaits `run()`, which starts the process (or
follows an adopted one), and on each exit kills what is left in the container's cgroup (as the
end of a PID namespace would), decides per restart policy and waits out the crash back-off
(Waiting / CrashLoopBackOff) before restarting. `run()` returns the final Terminated state when the
container will not run again. `stop(grace)` sends SIGTERM to the process group, waits up to the
grace period, then SIGKILLs the group and kills the whole cgroup; after its SIGKILL the process's
memory is reaped at once by process_mrelease on a thread of its own (runtime/mrelease.py), not
when the victim gets to run its exit path. Cancelling `run()` never touches
the process: it keeps running (and is still observed until `detach()`), and a new `run()` picks
it up again; `detach()` forgets it so a later agent can adopt it: that is how the agent shuts
down without taking its pods with it.

An optional `prepare` step is awaited before every start (an image container pulls its image and
builds its OCI bundle there, pods/image_container.py): it reports its Waiting states through the
worker, a stop cancels it (nothing starts then), and an error it raises is a StartError exit.

Every state change is pushed to `on_change(status)`, so the daemon can checkpoint and the API
can report; the worker keeps no other channel.

Progress, for the watchdog (daemonkit/progress.py): killing what is left in the cgroup is a step
bounded by KILL_STEP_S, a stop one bounded by its grace period plus STOP_SLACK_S. Waiting for a
running process and a crash-loop back-off are not steps: they may last as long as they last.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from nodeagent.agent.node.procfs import is_same_process, parent_pid, start_time_to_wall
from nodeagent.agent.runtime import logs, stdio_holder
from nodeagent.agent.runtime.attach import recreate_fifo
from nodeagent.agent.runtime.backoff import CrashBackoff
from nodeagent.agent.runtime.cgroup_handle import CgroupHandle
from nodeagent.agent.runtime.mrelease import MemoryReleaser, default_releaser
from nodeagent.agent.runtime.spawn import SETUP_FAILED, LaunchSpec, Spawned, spawn_ready
from nodeagent.agent.runtime.state import (
    REASON_CRASH_LOOP,
    REASON_CREATING,
    REASON_OOM,
    REASON_START_ERROR,
    START_ERROR_EXIT_CODE,
    ContainerStatus,
    Running,
    Terminated,
    Waiting,
    crash_loop_message,
    decode_wait_status,
    should_restart,
    terminated,
    unknown_exit,
)
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.core.duration import format_go_duration
from nodeagent.core.waits import wait_for
from nodeagent.daemonkit import faults
from nodeagent.daemonkit.progress import Steps

log = structlog.get_logger(__name__)

Spawner = Callable[[LaunchSpec, str, Sequence[str], "int | None"], Spawned]
# before every start, awaited (an image container's pull and bundle): it reports Waiting states
# through its argument and returns once the spawner may run; cancelled by stop()
Prepare = Callable[[Callable[[Waiting], None]], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]
KILL_WAIT_S = 10.0  # after SIGKILL an exit is due at once; bounded in case of D-state
KILL_STEP_S = 30.0  # a cgroup kill: the driver gives up after its own 5 s kill timeout
STOP_SLACK_S = KILL_WAIT_S + 2 * KILL_STEP_S  # a stop past its grace: SIGKILL, the wait, two cgroup kills


@dataclass(frozen=True)
class ContainerConfig:
    """Everything the worker needs to know about one container of one pod."""

    name: str
    launch: LaunchSpec
    log_dir: str  # logs.container_log_dir(...)
    restart_policy: str = "Always"
    oom_score_adj: int | None = None
    pod_name: str = ""
    pod_namespace: str = "default"
    pod_uid: str = ""
    image: str = ""
    runtime_console: bool = False  # tty: the OCI runtime makes the terminal and hands it over (oci/console.py)


@dataclass
class _Proc:
    pid: int
    start_time: int
    pidfd: int
    child: bool
    started_at: float | None
    oom_before: int | None
    exited: asyncio.Future[Terminated]
    finished_mono: float = 0.0
    ready_fd: int | None = None  # open while the shim has not said it is in its cgroups
    ready: bool = True

    @property
    def container_id(self) -> str:
        return f"nodeagent://{self.pid}@{self.start_time}"


@dataclass
class _Exit:
    state: Terminated
    mono: float  # Clock.now() at the exit, for the back-off


class ContainerWorker:
    def __init__(
        self,
        config: ContainerConfig,
        cgroup: CgroupHandle | None = None,
        *,
        clock: Clock | None = None,
        backoff: CrashBackoff | None = None,
        sleep: Sleep = asyncio.sleep,
        on_change: Callable[[ContainerStatus], None] | None = None,
        spawner: Spawner = spawn_ready,
        steps: Steps | None = None,
        releaser: MemoryReleaser | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        self.config = config
        self.cgroup = cgroup
        self.clock: Clock = clock or SystemClock()
        self.backoff = backoff or CrashBackoff(clock=self.clock)
        self._sleep = sleep
        self._on_change = on_change
        self._spawner = spawner
        self._prepare = prepare
        self._steps = steps
        self._releaser = releaser if releaser is not None else default_releaser()
        self._status = ContainerStatus(name=config.name, image=config.image)
        self._proc: _Proc | None = None
        self._exit: _Exit | None = None
        self._stopping = False
        self._killed_to_restart = False  # this run is being killed so it restarts (liveness, postStart)
        self._killed_now: _Proc | None = None  # the run kill_now() SIGKILLed: stop() skips its SIGTERM and grace
        self._stop_event = asyncio.Event()
        self._running = False
        self._log = log.bind(pod=f"{config.pod_namespace}/{config.pod_name}", container=config.name)

    # ---- what others read ----
    @property
    def status(self) -> ContainerStatus:
        return self._status

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def start_time(self) -> int | None:
        return self._proc.start_time if self._proc else None

    @property
    def last_exit(self) -> Terminated | None:
        """The exit the restart policy is deciding on (or waiting out a back-off for); None while running."""
        return self._exit.state if self._exit is not None and self._proc is None else None

    def hold(self) -> None:
        """Never start a process (a pod whose deletion is recorded): call before run(); stop() still applies."""
        self._stopping = True
        self._stop_event.set()

    @property
    def log_path(self) -> str:
        return logs.run_log_path(self.config.log_dir, self._status.restart_count)

    def _set(self, **changes: object) -> None:
        self._status = replace(self._status, **changes)  # type: ignore[arg-type]
        if self._on_change is not None:
            try:
                self._on_change(self._status)
            except Exception:  # noqa: BLE001 - a failing listener must not break supervision
                self._log.exception("container_status_listener_failed")

    # ---- starting and watching ----
    def _oom_kills(self) -> int | None:
        if self.cgroup is None:
            return None
        try:
            return self.cgroup.oom_kills()
        except (OSError, ValueError):
            return None

    def _waiting(self, state: Waiting) -> None:
        if not self._stopping:
            self._set(state=state, container_id="")

    async def _prepared(self) -> bool:
        """Await the `prepare` step; False when stop() came first (the step is cancelled)."""
        if self._prepare is None:
            return True
        step = asyncio.ensure_future(self._prepare(self._waiting))
        stopper = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({step, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not step.done():
                step.cancel()
            await asyncio.gather(step, stopper, return_exceptions=True)
        if self._stopping or step.cancelled():
            return False
        step.result()  # its error is the start's
        return True

    async def _start(self) -> None:
        """Prepare (if the container has such a step), then spawn the next run."""
        try:
            if not await self._prepared():
                return
        except (OSError, ValueError) as e:
            self._start_failed(e)
            return
        self._launch()

    def _start_failed(self, e: Exception) -> None:
        now = self.clock.wall()
        state = Terminated(START_ERROR_EXIT_CODE, REASON_START_ERROR, None, now, None, str(e))
        self._log.warning("container_start_failed", error=str(e))
        self._exit = _Exit(state, self.clock.now())
        self._set(state=state, container_id="")

    def _launch(self) -> None:
        """Spawn the next run; on failure record a StartError exit for run() to handle."""
        path = self.log_path
        try:
            logs.prepare_log_dir(self.config.log_dir)
            logs.prune_runs(self.config.log_dir, self._status.restart_count)
            files = self.cgroup.procs_files() if self.cgroup else []
            oom_before = self._oom_kills()
            launch, slave = self._stdio(path)
            try:
                faults.hit("before-spawn")
                sp = self._spawner(launch, path, files, self.config.oom_score_adj)
            except BaseException:
                self._release_keeper()  # no run to keep its stdin for
                raise
            finally:
                if slave is not None:
                    os.close(slave)
            faults.hit("after-spawn")
        except (OSError, ValueError) as e:
            self._start_failed(e)
            return
        self._watch(sp.pid, sp.start_time, child=True, started_at=self.clock.wall(), oom_before=oom_before,
                    ready_fd=sp.ready_fd)
        self._log.info("container_started", pid=sp.pid, restart_count=self._status.restart_count)

    def _stdio(self, log_path: str) -> tuple[LaunchSpec, int | None]:
        """This run's stdin and terminal (blocking, small): a fresh stdin FIFO, with its keeper for
        stdinOnce, or a fresh terminal and its holder for tty (stdio_holder.py); the slave's
        descriptor, which the caller closes once the run has opened it."""
        launch = self.config.launch
        self._release_keeper()  # an earlier run's
        if launch.stdin:
            recreate_fifo(launch.stdin)
        if launch.tty and self.config.runtime_console:
            return launch, None  # no terminal of the run's: the spawner takes the runtime's console
        if launch.tty:
            _, slave = stdio_holder.start_tty(self.config.log_dir, log_path)
            return replace(launch, terminal=os.ttyname(slave)), slave
        if launch.stdin and launch.stdin_once:
            stdio_holder.start_stdin_keeper(self.config.log_dir, launch.stdin)
        return launch, None

    def _release_keeper(self) -> None:
        if self.config.launch.stdin_once:
            stdio_holder.release(self.config.log_dir, stdio_holder.STDIN)

    def _watch(
        self,
        pid: int,
        start_time: int,
        *,
        child: bool,
        started_at: float | None,
        oom_before: int | None,
        pidfd: int | None = None,
        ready_fd: int | None = None,
    ) -> None:
        """Follow the process; Running once it is ready (at once without a ready pipe: adopted, fakes)."""
        loop = asyncio.get_running_loop()
        if pidfd is None:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                if ready_fd is not None:
                    os.close(ready_fd)
                raise
        proc = _Proc(pid, start_time, pidfd, child, started_at, oom_before, loop.create_future(),
                     ready_fd=ready_fd, ready=ready_fd is None)
        self._proc = proc
        self._exit = None
        loop.add_reader(pidfd, self._on_exit, proc)
        if ready_fd is None:
            self._set(state=Running(started_at or self.clock.wall()), container_id=proc.container_id)
        else:
            self._set(state=Waiting(REASON_CREATING), container_id="")
            loop.add_reader(ready_fd, self._on_ready, proc)

    def _settle_ready(self, proc: _Proc) -> bool:
        """Read the ready pipe once: True when the shim said "ready" (then or before)."""
        fd = proc.ready_fd
        if fd is None:
            return proc.ready
        try:
            data = os.read(fd, 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)
        proc.ready_fd = None
        proc.ready = data.startswith(b"1")
        return proc.ready

    def _on_ready(self, proc: _Proc) -> None:
        """The shim is in its cgroups with its oom_score_adj (or failed: then its exit follows)."""
        if self._settle_ready(proc) and self._proc is proc:
            proc.started_at = self.clock.wall()
            self._set(state=Running(proc.started_at), container_id=proc.container_id)

    def _shim_error(self) -> str:
        """The shim's own "nodeagent-shim: ..." line in the run's log (the last one), else a generic text."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                tail = f.read().decode(errors="replace")
        except OSError:
            tail = ""
        lines = [line for line in tail.splitlines() if line.startswith("nodeagent-shim:")]
        return lines[-1] if lines else "the container process could not be set up in its cgroup"

    def _on_exit(self, proc: _Proc) -> None:
        """pidfd readable: the process is gone. Reap it if it is ours and record the Terminated state."""
        code: int | None = None
        sig: int | None = None
        if proc.child:
            try:
                wpid, wstatus = os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                wpid, wstatus = proc.pid, None
            if wpid == 0:
                return  # not exited after all; keep watching
            if wstatus is not None:
                code, sig = decode_wait_status(wstatus)
        loop = asyncio.get_running_loop()
        loop.remove_reader(proc.pidfd)
        os.close(proc.pidfd)
        ready = self._settle_ready(proc)
        finished = self.clock.wall()
        proc.finished_mono = self.clock.now()
        oom_after = self._oom_kills()
        if not ready and code == SETUP_FAILED:  # the shim could not join its cgroup (or set its adj)
            state = Terminated(START_ERROR_EXIT_CODE, REASON_START_ERROR, None, finished, None,
                               self._shim_error(), "")
        elif code is not None:
            state = terminated(code, sig, proc.started_at, finished, proc.oom_before, oom_after, proc.container_id)
        elif proc.oom_before is not None and oom_after is not None and oom_after > proc.oom_before:
            state = Terminated(128 + signal.SIGKILL, REASON_OOM, proc.started_at, finished, signal.SIGKILL, "",
                               proc.container_id)
        else:
            state = unknown_exit(proc.started_at, finished, proc.container_id)
        self._proc = None
        self._release_keeper()  # the run's stdin keeper goes with it
        self._exit = _Exit(state, proc.finished_mono)
        self._log.info("container_exited", pid=proc.pid, exit_code=state.exit_code, reason=state.reason)
        self._set(state=state)
        if not proc.exited.done():
            proc.exited.set_result(state)

    def adopt(
        self,
        pid: int,
        start_time: int,
        *,
        started_at: float | None = None,
        restart_count: int = 0,
        last_state: Terminated | None = None,
        oom_kills_before: int | None = None,
        probe: bool = False,
    ) -> bool:
        """Follow a process started before an agent restart; False if it is no longer there.

        Call before run(), inside the event loop. The pidfd is opened before the start time is
        checked, so a reused PID can never be mistaken for the container. A container that
        exited while the agent was away is recorded as such (exit unknown) and `run()` applies
        the restart policy to it; with `probe`, nothing is recorded then (the caller looks further).
        """
        if self._running or self._proc is not None:
            raise RuntimeError("adopt() must come before run() and only once")
        self._set(restart_count=restart_count, last_state=last_state)
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            pidfd = None
        alive = pidfd is not None and is_same_process(pid, start_time)
        if pidfd is not None and not alive:
            os.close(pidfd)
        if probe and not alive:
            return False
        if started_at is None and alive:
            started_at = start_time_to_wall(start_time)
        if alive:
            oom = oom_kills_before if oom_kills_before is not None else self._oom_kills()
            child = parent_pid(pid) == os.getpid()
            self._watch(pid, start_time, child=child, started_at=started_at, oom_before=oom, pidfd=pidfd)
            self._log.info("container_adopted", pid=pid)
            return True
        self._release_keeper()  # the run ended while the agent was away
        now = self.clock.wall()
        oom_after = self._oom_kills()
        cid = f"nodeagent://{pid}@{start_time}"
        if oom_kills_before is not None and oom_after is not None and oom_after > oom_kills_before:
            state = Terminated(137, REASON_OOM, started_at, now, signal.SIGKILL, "", cid)
        else:
            state = unknown_exit(started_at, now, cid)
        self._exit = _Exit(state, self.clock.now())
        self._set(state=state, container_id=cid)
        self._log.info("container_gone_on_adopt", pid=pid)
        return False

    def restore_exit(
        self, state: Terminated, *, restart_count: int = 0, last_state: Terminated | None = None
    ) -> None:
        """Resume a container that had already exited before an agent restart (from a checkpoint):
        `run()` then applies the restart policy to that exit instead of starting it afresh."""
        if self._running or self._proc is not None or self._exit is not None:
            raise RuntimeError("restore_exit() must come before run() and only once")
        # the exit on the monotonic scale, so a back-off waited out partly before the restart is not waited again
        mono = self.clock.now()
        if state.finished_at is not None:
            mono -= max(0.0, self.clock.wall() - state.finished_at)
        self._exit = _Exit(state, mono)
        self._set(state=state, restart_count=restart_count, last_state=last_state,
                  container_id=state.container_id)

    # ---- the loop ----
    def _step(self, what: str, bound: float) -> contextlib.AbstractContextManager[None]:
        if self._steps is None:
            return contextlib.nullcontext()
        c = self.config
        return self._steps.step(f"pod {c.pod_namespace}/{c.pod_name} container {c.name}: {what}", bound)

    async def _kill_leftovers(self) -> None:
        """Kill whatever is left in the container's cgroup (a blocking, bounded driver call)."""
        if self.cgroup is not None:
            try:
                with self._step("kill what is left in its cgroup", KILL_STEP_S):
                    await asyncio.get_running_loop().run_in_executor(None, self.cgroup.kill)
            except OSError as e:
                self._log.warning("container_cgroup_kill_failed", error=str(e))

    async def _wait_or_stop(self, delay: float) -> bool:
        """Sleep `delay` unless stop() comes first; True when stopped."""
        sleeper = asyncio.ensure_future(self._sleep(delay))
        stopper = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sleeper, stopper):
                t.cancel()
            await asyncio.gather(sleeper, stopper, return_exceptions=True)
        return self._stopping

    async def run(self) -> Terminated | None:
        """Run the container until it is done for good (policy) or stopped; returns its last exit."""
        if self._running:
            raise RuntimeError("run() is already running")
        self._running = True
        try:
            if self._proc is None and self._exit is None and not self._stopping:
                await self._start()
            while True:
                if self._proc is not None:
                    await asyncio.shield(self._proc.exited)
                ex = self._exit
                if ex is None:  # stopped before anything ran
                    return None
                await self._kill_leftovers()
                forced, self._killed_to_restart = self._killed_to_restart, False
                policy = self.config.restart_policy
                if self._stopping or not (should_restart(policy, ex.state) or (forced and policy != "Never")):
                    return ex.state
                delay = self.backoff.remaining(ex.mono)
                if delay > 0:
                    msg = crash_loop_message(
                        format_go_duration(self.backoff.current()), self.config.name,
                        self.config.pod_name, self.config.pod_namespace, self.config.pod_uid,
                    )
                    self._set(state=Waiting(REASON_CRASH_LOOP, msg), last_state=ex.state)
                    self._log.info("container_backoff", delay=round(delay, 3))
                    if await self._wait_or_stop(delay):
                        self._set(state=ex.state)
                        return ex.state
                self.backoff.restarted(ex.mono)
                self._set(restart_count=self._status.restart_count + 1, last_state=ex.state)
                await self._start()
        finally:
            self._running = False

    def kill_to_restart(self) -> None:
        """The next exit is a kill that asks for a restart (a failed liveness probe or postStart
        hook): it restarts unless the policy is Never, whatever its exit code, as the kubelet's
        shouldRestartOnFailure does (a container that exits 0 on SIGTERM still restarts under OnFailure)."""
        self._killed_to_restart = True

    # ---- stopping ----
    def _signal(self, proc: _Proc, sig: int) -> None:
        """Signal the process group; only while the leader is known to hold its PID.

        After a SIGKILL the leader's memory is reaped off the loop (process_mrelease on a dup of
        its pidfd, so _on_exit may close the pidfd meanwhile); nothing here waits for it."""
        if self._proc is not proc:  # exited: its pidfd is closed and the number may be reused
            return
        try:
            signal.pidfd_send_signal(proc.pidfd, sig)
        except ProcessLookupError:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:  # after killpg: a group sharing its mm is dying too
            self._releaser.release_soon(proc.pidfd, proc.pid)

    def kill_now(self) -> None:
        """SIGKILL the running process (group) at once and never restart it: a hard eviction, where
        the node is at its line and every millisecond before the kill is memory the victim keeps
        growing into. It comes before the eviction's bookkeeping; stop() follows as usual and
        finds the process dying (no SIGTERM, no grace)."""
        self.hold()
        proc = self._proc
        if proc is None or self._killed_now is proc:
            return
        self._killed_now = proc
        self._signal(proc, signal.SIGKILL)  # and process_mrelease on its own thread
        self._log.info("container_killed", pid=proc.pid)

    async def stop(self, grace_period: float) -> ContainerStatus:
        """SIGTERM, wait up to `grace_period` seconds, then SIGKILL group and cgroup; final status."""
        with self._step("stop", max(grace_period, 0) + STOP_SLACK_S):
            return await self._stop(grace_period)

    async def _stop(self, grace_period: float) -> ContainerStatus:
        self._stopping = True
        self._stop_event.set()
        proc = self._proc
        if proc is not None and self._killed_now is proc:  # kill_now() sent the SIGKILL
            await self._kill_leftovers()
            try:
                await wait_for(asyncio.shield(proc.exited), KILL_WAIT_S)
            except TimeoutError:
                self._log.warning("container_kill_timeout", pid=proc.pid)
        elif proc is not None:
            self._log.info("container_stopping", pid=proc.pid, grace_period=grace_period)
            self._signal(proc, signal.SIGTERM)
            faults.hit("stop-mid-grace")
            try:
                await wait_for(asyncio.shield(proc.exited), max(grace_period, 0))
            except TimeoutError:
                self._log.info("container_grace_expired", pid=proc.pid)
                self._signal(proc, signal.SIGKILL)
                await self._kill_leftovers()
                try:
                    await wait_for(asyncio.shield(proc.exited), KILL_WAIT_S)
                except TimeoutError:
                    self._log.warning("container_kill_timeout", pid=proc.pid)
        await self._kill_leftovers()
        if isinstance(self._status.state, Waiting) and self._exit is not None:
            self._set(state=self._exit.state)
        return self._status

    def detach(self) -> None:
        """Stop watching without touching the process (agent shutdown); it can be adopted later."""
        proc = self._proc
        if proc is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(proc.pidfd)
            os.close(proc.pidfd)
            if proc.ready_fd is not None:
                loop.remove_reader(proc.ready_fd)
                os.close(proc.ready_fd)
                proc.ready_fd = None
            self._proc = None
            if not proc.exited.done():
                proc.exited.cancel()
