"""The OCI runtime driver: one bundle per container, run by runc (or crun) in the foreground.

How a container starts (`OciRuntime.spawner(...)` is a Spawner for the ContainerWorker, so
supervision, restart policy, back-off, logs and re-adoption are the host-process runtime's own):

  1. stale runtime state of the same container (a monitor killed with SIGKILL) is deleted;
  2. the rootfs is mounted: an overlay of the image's layers under a fresh writable layer in the
     pod's directory on nodefs (rootfs.py);
  3. the user is resolved against the image's /etc/passwd and /etc/group (read inside the rootfs,
     never through a symlink leaving it) and config.json is written atomically (bundle.py);
  4. `runc run --bundle DIR ID` is spawned through the spawn shim into the runtime's own cgroup
     (layout.RUNTIME_PATH, next to kubepods, as containerd's shims live in the runtime's cgroup and
     not in the pod's: in the pod's cgroup its CPU quota throttled runc's own start, 10 ms of CPU
     per 100 ms at a 100m limit; README.md, "Start figures (image pods)"), with the container's
     log file as stdout and stderr and its stdin FIFO, if any, as stdin (the runtime copies its
     stdio to and from the container's; for `tty: true` the monitor's stdio is the run's
     terminal, which runc relays to the container's console: stdio_holder.py; crun hands the
     console over instead: console.py): the monitor's PID is
     what the worker watches (pidfd), signals (runc forwards SIGTERM to the container) and
     checkpoints; its exit status is the container's (128+n for a signal). The container itself
     runs in `<container cgroup>/oci`, a child of the cgroup the agent created with the
     container's limits: the runtime removes its own child when the container ends (runc only
     once it is deleted: `--keep`), the agent's cgroup (limits, OOM-kill counter) stays.

The monitors cost one small process per container (runc 1.1: ~10 MB RSS; crun less), what
containerd's shim costs per pod, charged to the runtime's cgroup and not to the pod (no pod
overhead is declared); in exchange nothing of the agent is a parent of a container that must
outlive it.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import secrets
import select
import signal
import subprocess
import threading
import time
import tty
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import structlog

from nodeagent.agent.images.store import replace_file
from nodeagent.agent.runtime.oci import console as console_mod
from nodeagent.agent.runtime.oci import rootfs
from nodeagent.agent.runtime.oci.bundle import SANDBOX_OOM_SCORE_ADJ, ContainerBundle, config_json
from nodeagent.agent.runtime.oci.sandbox import Sandbox
from nodeagent.agent.runtime.spawn import LaunchSpec, Spawned, clamp_oom_score_adj, spawn
from nodeagent.daemonkit.subprocs import kill_and_reap

log = structlog.get_logger(__name__)

OCI_CGROUP = "oci"  # the runtime's own child of the container's cgroup
DELETE_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 120.0  # a container not running by then stays Waiting (ContainerCreating) until it exits
READY_POLL_S = 0.005
READY_POLL_MAX_S = 0.05
RUNTIME_COMMS = ("runc", "crun")  # /proc/<pid>/comm of the runtime's own processes ("runc:[2:INIT]"...)
MakeBundle = Callable[[str, str, "int | None"], ContainerBundle]  # (passwd, group, sandbox pid) -> bundle
RUNTIME_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}  # the runtime's own environment (not the container's)


def container_id(pod_uid: str, name: str) -> str:
    """The runtime's container ID (runc accepts [\\w+-.]+): the pod's uid and the container's name."""
    return f"{pod_uid}-{name}"


def cgroups_path(driver_root: str, container_cgroup: str) -> str:
    """linux.cgroupsPath: the runtime's child of the container's cgroup, absolute in cgroupfs."""
    return posixpath.join("/", driver_root.strip("/"), container_cgroup, OCI_CGROUP)


def read_in_rootfs(root: str, path: str, limit: int = 1 << 20) -> str:
    """A file of the image (e.g. /etc/passwd) read without leaving the rootfs; "" if absent or unsafe."""
    real_root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(real_root, path.lstrip("/")))
    if not full.startswith(real_root + os.sep):
        return ""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return ""
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BundleDirs:
    """Where one container's bundle lives: <pod dir>/oci/<container>/{config.json,rootfs,upper,work}."""

    root: str

    @property
    def rootfs(self) -> str:
        return os.path.join(self.root, "rootfs")

    @property
    def upper(self) -> str:
        return os.path.join(self.root, "upper")

    @property
    def work(self) -> str:
        return os.path.join(self.root, "work")

    @property
    def config(self) -> str:
        return os.path.join(self.root, "config.json")


@dataclass(frozen=True)
class OciExec:
    """How an interactive command (`kubectl exec`) reaches a running image container: through the
    runtime's `exec`, which starts it in the container's namespaces and cgroup with the process
    spec of its config.json (env, working directory, user, oomScoreAdj) and relays its stdio, or
    a terminal of its own with `--tty`. Its `--pid-file` (under the container's bundle directory)
    names the exec'd process, so a client that goes away gets it killed, not only the runtime."""

    binary: str
    root: str
    cid: str
    bundle_dir: str
    cgroup: str  # the container's cgroup path: a pid read back must still be in it to be killed

    def pid_file(self) -> str:
        return os.path.join(self.bundle_dir, f"exec-{secrets.token_hex(6)}.pid")

    def known(self) -> bool:
        """The runtime has written the container's state (runc's state.json, crun's status): its
        process can be in the cgroup, and so the container Running, a moment before that, and an
        exec then fails with "container does not exist" (a postStart hook did, in CI)."""
        d = os.path.join(self.root, self.cid)
        return os.path.exists(os.path.join(d, "state.json")) or os.path.exists(os.path.join(d, "status"))

    def argv(self, command: Sequence[str], *, tty: bool, pid_file: str) -> list[str]:
        if not command:
            raise ValueError("command: Required value")
        return [self.binary, "--root", self.root, "exec", *(["--tty"] if tty else []), "--pid-file", pid_file,
                self.cid, *command]

    def launch(self, command: Sequence[str], *, tty: bool, pid_file: str) -> LaunchSpec:
        """What the spawn shim starts: the runtime's `exec`, with the runtime's environment."""
        return LaunchSpec(tuple(self.argv(command, tty=tty, pid_file=pid_file)), dict(RUNTIME_ENV))

    def kill(self, pid_file: str) -> bool:
        """SIGKILL the exec'd process the pid file names, if it is still one of this container's;
        False while the runtime has not written the file yet (it writes it once the process runs)."""
        try:
            with open(pid_file, encoding="ascii") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return False
        except OSError:
            return True
        try:
            pid = int(text or "0")
        except ValueError:
            return True
        if pid <= 0:
            return False  # being written
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return True  # gone already
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
                if self.cgroup not in f.read():
                    return True
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)
        return True


def monitor_launch(argv: Sequence[str], container: LaunchSpec, *, bundle_dir: str = "/") -> LaunchSpec:
    """The runtime's monitor with the container's stdio: `runc run` in the foreground copies its
    stdin (the container's FIFO) to the container's, or relays its terminal (this run's pty slave,
    stdio_holder.py, made raw) to the console it creates for a `process.terminal` container. A
    tty container without a terminal of the run's takes its console from the runtime (crun:
    console.py): the monitor then has no stdin, and only its own messages go to the log. It runs
    in the bundle directory (where the console socket's relative name points)."""
    if container.terminal:
        set_raw(container.terminal)
    stdin = None if container.tty and not container.terminal else container.stdin
    return LaunchSpec(tuple(argv), dict(RUNTIME_ENV), working_dir=bundle_dir, stdin=stdin,
                      stdin_once=container.stdin_once and stdin is not None, terminal=container.terminal)


class OciRuntime:
    def __init__(self, name: str, binary: str, root: str) -> None:
        self.name = name
        self.binary = binary
        self.root = root  # the runtime's --root (its state), under the agent's stateDir

    def _argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", self.root, *args]

    @property
    def hands_over_console(self) -> bool:
        """A tty container's console comes from the runtime over a socket (console.py), instead
        of the runtime relaying a terminal of the run's: crun's relay garbles the last output."""
        return self.name == "crun"

    def run_argv(self, bundle_dir: str, cid: str, *, console_socket: bool = False) -> list[str]:
        """runc keeps the dead container (`--keep`): its cgroup, and the OOM-kill counter v1 keeps
        only there, outlive the container until the agent has read them and deletes it."""
        keep = ["--keep"] if self.name == "runc" else []
        console = ["--console-socket", console_mod.SOCKET_NAME] if console_socket else []
        return self._argv("run", *keep, *console, "--bundle", bundle_dir, cid)

    def exec_argv(self, cid: str, argv: Sequence[str]) -> list[str]:
        return self._argv("exec", cid, *argv)

    def exec_handle(self, cid: str, dirs: BundleDirs, cgroup: str) -> OciExec:
        return OciExec(self.binary, self.root, cid, dirs.root, cgroup)

    def has_state(self, cid: str) -> bool:
        return os.path.isdir(os.path.join(self.root, cid))

    def delete(self, cid: str) -> None:
        """Forget a container's runtime state (killing what is left of it); blocking, bounded."""
        if not self.has_state(cid):
            return
        p = subprocess.run(self._argv("delete", "--force", cid), capture_output=True, text=True,
                           timeout=DELETE_TIMEOUT_S, check=False)
        if p.returncode != 0 and self.has_state(cid):
            raise OSError(f"{self.name} delete {cid}: {p.stderr.strip()[-500:]}")

    def prepare(self, dirs: BundleDirs, lowerdirs: Sequence[str], make_bundle: MakeBundle,
                sandbox: Sandbox | None) -> ContainerBundle:
        """Steps 1-3: the bundle on disk, ready to run (blocking: a mount, a few files). The
        sandbox's `unshare` runs meanwhile: only the runtime needs its namespaces, not config.json."""
        pid = sandbox.start() if sandbox is not None else None
        os.makedirs(dirs.root, mode=0o700, exist_ok=True)
        rootfs.mount_overlay(lowerdirs, dirs.upper, dirs.work, dirs.rootfs)
        passwd = read_in_rootfs(dirs.rootfs, "/etc/passwd")
        group = read_in_rootfs(dirs.rootfs, "/etc/group")
        bundle = make_bundle(passwd, group, pid)
        if sandbox is not None and (ready := sandbox.ensure()) != pid:  # it died meanwhile: a new one
            bundle = make_bundle(passwd, group, ready)
        replace_file(dirs.config, json.dumps(config_json(bundle)).encode())
        return bundle

    def spawner(self, cid: str, dirs: BundleDirs, lowerdirs: Sequence[str], make_bundle: MakeBundle,
                sandbox: Sandbox | None, monitor_procs: Callable[[], list[str]] | None = None,
                ) -> Callable[[LaunchSpec, str, Sequence[str], int | None], Spawned]:
        """A Spawner for ContainerWorker that runs the container from its image (see the module)."""
        def start(launch: LaunchSpec, log_path: str, _procs: Sequence[str], _adj: int | None) -> Spawned:
            self.delete(cid)
            self.prepare(dirs, lowerdirs, make_bundle, sandbox)
            files = monitor_procs() if monitor_procs is not None else (sandbox.procs_files() if sandbox else [])
            monitor = monitor_launch(self.run_argv(dirs.root, cid), launch)
            sp = spawn(monitor, log_path, files, clamp_oom_score_adj(SANDBOX_OOM_SCORE_ADJ))
            log.info("oci_container_spawned", runtime=self.name, id=cid, monitor_pid=sp.pid)
            return sp

        return start

    def monitor_spawner(self, cid: str, dirs: BundleDirs, monitor_procs: Callable[[], list[str]],
                        container_pids: Callable[[], list[int]],
                        ) -> Callable[[LaunchSpec, str, Sequence[str], int | None], Spawned]:
        """A Spawner for a bundle already prepared (`prepare`, off the loop): only step 4, the
        monitor in the cgroup of `monitor_procs`, with a ready signal: the container reads Running
        once its own process (no longer the runtime's init) is in its cgroup (`container_pids`:
        the runtime's child of the container cgroup)."""
        def start(launch: LaunchSpec, log_path: str, _procs: Sequence[str], _adj: int | None) -> Spawned:
            files = monitor_procs()
            take_console = launch.tty and not launch.terminal  # the supervisor left it to us
            sock = console_mod.listen(dirs.root) if take_console else None
            try:
                monitor = monitor_launch(self.run_argv(dirs.root, cid, console_socket=sock is not None), launch,
                                         bundle_dir=dirs.root)
                sp = spawn(monitor, log_path, files, clamp_oom_score_adj(SANDBOX_OOM_SCORE_ADJ))
            except BaseException:
                if sock is not None:
                    console_mod.close(sock, dirs.root)
                raise
            if sock is not None:
                console_mod.hand_over(sock, dirs.root, os.path.dirname(log_path), log_path)
            log.info("oci_container_spawned", runtime=self.name, id=cid, monitor_pid=sp.pid)
            return replace(sp, ready_fd=watch_ready(sp.pid, container_pids))

        return start

    def cleanup(self, cid: str, dirs: BundleDirs) -> None:
        """After the container ended for good: runtime state, the rootfs mount, the writable layer."""
        try:
            self.delete(cid)
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("oci_delete_failed", id=cid, error=str(e))
        rootfs.unmount_all(dirs.root)

    async def exec(self, cid: str, argv: Sequence[str]) -> tuple[int, bytes]:
        """Run argv inside the running container (`runc exec`): (exit code, stdout+stderr); the
        caller bounds it (asyncio.timeout): a cancel kills the exec'd process."""
        if not argv:
            raise ValueError("command: Required value")
        proc = await asyncio.create_subprocess_exec(
            *self.exec_argv(cid, argv), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            await kill_and_reap(proc)  # bounded: an exec stuck in the kernel must not hang the cancel
            raise
        return proc.returncode if proc.returncode is not None else -1, out


def is_runtime_process(comm: str, exe: str) -> bool:
    """A process of the runtime's own, not yet the container's: runc's init stages rename
    themselves ("runc:[0:PARENT]", "runc:[1:CHILD]", "runc:[2:INIT]"), but right after runc
    re-execs itself (from a memfd copy of its binary, or /proc/self/exe) the name is still the
    exec'd file's ("exe", a number); its executable is then runc's, or the memfd."""
    if comm.startswith(RUNTIME_COMMS):
        return True
    path = exe.removesuffix(" (deleted)")
    return path.startswith("/memfd:") or os.path.basename(path) in RUNTIME_COMMS


def container_processes(pids: Sequence[int]) -> Iterator[int]:
    """Those of `pids` that are the container's own processes (exec'd past the runtime's init)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if not is_runtime_process(comm, exe):
            yield pid


def container_process_running(pids: Sequence[int]) -> bool:
    """One of `pids` is the container's own process: it has exec'd past the runtime's init."""
    return next(container_processes(pids), None) is not None


def open_console(pids: Sequence[int]) -> int | None:
    """A descriptor of a `process.terminal` container's console (the terminal the runtime made
    for it, its first process's stdin), for its window size: runc relays SIGWINCH from its own
    terminal to it, crun 1.8 does not. None when no process of it has a terminal as stdin."""
    for pid in container_processes(pids):
        try:
            fd = os.open(f"/proc/{pid}/fd/0", os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        if os.isatty(fd):
            return fd
        os.close(fd)
    return None


def set_raw(terminal: str) -> None:
    """The monitor's terminal passes bytes through untouched (the container's console has the line
    discipline: echo, ^C, CR/LF), as runc sets it itself; crun 1.8 leaves it cooked (echoing twice)."""
    fd = os.open(terminal, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        tty.setraw(fd)
    finally:
        os.close(fd)


class _Watchers:
    """How many starts are being watched: each poll waits READY_POLL_S times a quarter of that
    count (at most READY_POLL_MAX_S), so a burst of 100 starts polls ~25 times less often each
    instead of 100 threads reading /proc every 5 ms (which took the CPU from the runtimes they
    wait for); a lone start still polls every 5 ms."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self._lock:
            self.count += 1

    def remove(self) -> None:
        with self._lock:
            self.count -= 1

    def interval(self) -> float:
        return min(READY_POLL_MAX_S, READY_POLL_S * max(1.0, self.count / 4))


_WATCHERS = _Watchers()


def watch_ready(monitor_pid: int, container_pids: Callable[[], list[int]],
                timeout: float = READY_TIMEOUT_S) -> int:
    """The read end (non-blocking) of a pipe that says "1" once the container's process runs in
    its cgroup, or closes without a word when the monitor exits first or `timeout` passes: the
    ContainerWorker's ready pipe, as the spawn shim's is for a host process. A short-lived thread
    polls (cgroup.procs and /proc/<pid>/comm: the runtime gives no event for it) and watches the
    monitor through a pidfd (readable once it exited), so it never outlives the start."""
    r, w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(r, False)
    pidfd = os.pidfd_open(monitor_pid)
    exited = select.poll()
    exited.register(pidfd, select.POLLIN)

    def poll() -> None:
        deadline = time.monotonic() + timeout
        _WATCHERS.add()
        try:
            while time.monotonic() < deadline:
                try:
                    if container_process_running(container_pids()):
                        os.write(w, b"1")
                        return
                except OSError:
                    pass
                if exited.poll(_WATCHERS.interval() * 1000):  # the container never ran: its exit says why
                    return
        finally:
            _WATCHERS.remove()
            os.close(w)
            os.close(pidfd)

    threading.Thread(target=poll, name=f"oci-ready-{monitor_pid}", daemon=True).start()
    return r


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points of every cgroup (v1) and cgroup2 filesystem."""
    out = []
    try:
        with open(mountinfo) as f:
            for line in f:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                fstype = line.split(" - ", 1)[1].split()[0]
                if fstype in ("cgroup", "cgroup2"):
                    out.append(fields[4].replace("\\040", " "))
    except OSError:
        return []
    return out


def remove_runtime_cgroups(mounts: Sequence[str], driver_root: str, paths: Sequence[str]) -> int:
    """rmdir `paths` (relative to the agent's cgroup root, in the order given: deepest first) in
    each of `mounts`: on a v1 host runc also creates the container's cgroup path in the
    hierarchies the agent's driver does not manage (blkio, devices, freezer, the hybrid unified
    one...) and `runc delete` removes only the leaf. A directory still in use or not empty stays
    (rmdir fails); returns how many were removed."""
    n = 0
    for mount in mounts:
        for path in paths:
            d = os.path.join(mount, driver_root.strip("/"), path.strip("/")).rstrip("/")
            if d == mount.rstrip("/"):
                continue
            try:
                os.rmdir(d)
                n += 1
            except OSError:
                pass
    return n
