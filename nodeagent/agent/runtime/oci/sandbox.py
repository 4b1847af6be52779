"""The pod's sandbox: one tiny process per pod holding the IPC and UTS namespaces that its image
containers join, as the pause container does for the kubelet.

It is `unshare --ipc --uts -- sleep infinity` (util-linux and coreutils: no binary of our own),
started through the spawn shim into the pod's sandbox cgroup (`pod<uid>/_sandbox`: an
underscore cannot start a container name, so it never collides) with the pause container's
oom_score_adj, as the pause container lives in its pod's cgroup. The runtime's `exec` sessions
run there too; its monitors (`runc run` in the foreground, one per container) run in the
runtime's own cgroup (layout.RUNTIME_PATH). Both are outside the agent's service cgroup, so they
survive an agent restart.

Its PID and start time are kept in `<pod dir>/oci/sandbox.json` (written atomically) so a
restarted agent finds it again; a PID reused by another process is never taken for it. The record
is not fsynced: it names a process, which a machine crash ends anyway.

Starting it is split in two so that `unshare` runs while the container's bundle is made: `start`
spawns it (its PID is what config.json names), `ensure` waits until it is in its namespaces
(before the runtime joins them) and records it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable

import structlog

from nodeagent.agent.images.store import replace_file
from nodeagent.agent.node.procfs import is_same_process, parent_pid
from nodeagent.agent.runtime.oci.bundle import SANDBOX_OOM_SCORE_ADJ
from nodeagent.agent.runtime.spawn import LaunchSpec, clamp_oom_score_adj, spawn

log = structlog.get_logger(__name__)

SANDBOX_CGROUP = "_sandbox"
UNSHARE = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin") or "/usr/bin/unshare"
SLEEP = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"
NAMESPACES_TIMEOUT_S = 2.0
NAMESPACES_POLL_S = 0.0005


def sandbox_cgroup(pod_cgroup: str) -> str:
    return f"{pod_cgroup}/{SANDBOX_CGROUP}"


class Sandbox:
    def __init__(self, state_dir: str, procs_files: Callable[[], list[str]]) -> None:
        """`state_dir`: the pod's <pod dir>/oci; `procs_files`: the sandbox cgroup's (created by the caller)."""
        self.state_dir = state_dir
        self._procs_files = procs_files
        self.pid: int | None = None
        self.start_time: int | None = None
        self._ready = False  # the process is in its namespaces and recorded
        # the pod's containers prepare concurrently (off the loop): one sandbox for all of them
        self._lock = threading.Lock()

    @property
    def record_path(self) -> str:
        return os.path.join(self.state_dir, "sandbox.json")

    def procs_files(self) -> list[str]:
        return self._procs_files()

    def _load(self) -> tuple[int, int] | None:
        try:
            with open(self.record_path, "rb") as f:
                data = json.loads(f.read())
            return int(data["pid"]), int(data["startTime"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def alive(self) -> bool:
        return self.pid is not None and self.start_time is not None and is_same_process(self.pid, self.start_time)

    def start(self) -> int:
        """The sandbox's PID: the recorded one while it lives, else a new process, spawned but
        maybe not yet in its namespaces (blocking, brief: no wait)."""
        with self._lock:
            return self._start()

    def ensure(self) -> int:
        """The sandbox's PID once it is in its own namespaces and recorded (blocking, brief)."""
        with self._lock:
            pid = self._start()
            if not self._ready:
                self._await_namespaces(pid)
                replace_file(self.record_path, json.dumps({"pid": pid, "startTime": self.start_time}).encode())
                self._ready = True
                log.info("sandbox_started", pid=pid, dir=self.state_dir)
            return pid

    def _start(self) -> int:
        if self.alive():
            assert self.pid is not None
            return self.pid
        saved = self._load()
        if saved is not None and is_same_process(*saved):
            self.pid, self.start_time = saved
            self._ready = True
            return saved[0]
        os.makedirs(self.state_dir, exist_ok=True)
        spec = LaunchSpec((UNSHARE, "--ipc", "--uts", "--", SLEEP, "infinity"), {"PATH": "/usr/bin:/bin"})
        sp = spawn(spec, os.path.join(self.state_dir, "sandbox.log"), self.procs_files(),
                   clamp_oom_score_adj(SANDBOX_OOM_SCORE_ADJ))
        self.pid, self.start_time, self._ready = sp.pid, sp.start_time, False
        return sp.pid

    @staticmethod
    def _await_namespaces(pid: int) -> None:
        """unshare execs sleep in the new namespaces: wait until it did (the namespaces differ from
        ours). Sleeping, not spinning with sched_yield: the wait is the same (10-20 ms at load 20
        on 2 CPUs) and the spin's CPU, taken from the shim and unshare it waits for, goes
        (thread CPU per start p50 2.2 -> 1.5 ms, interleaved runs of 30)."""
        deadline = time.monotonic() + NAMESPACES_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{pid}/ns/uts") != os.readlink("/proc/self/ns/uts"):
                    return
            except OSError:
                return
            time.sleep(NAMESPACES_POLL_S)

    def stop(self) -> None:
        """Kill the sandbox process (its containers are gone already) and reap it if it is ours."""
        if self.pid is None:
            saved = self._load()
            if saved is None:
                return
            self.pid, self.start_time = saved
        if self.alive():
            assert self.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            if parent_pid(self.pid) == os.getpid():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
        self.pid = self.start_time = None
        self._ready = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.record_path)
