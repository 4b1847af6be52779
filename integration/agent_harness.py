"""The real agent as a separate process, for the integration tests of test_agent.py.

`AgentProcess` writes a config of its own (stateDir under the test's temp dir, a cgroup root
`/nodeagent-it-<random>`, a free port on 127.0.0.1, a bearer token, housekeeping every second),
starts `python -m nodeagent run`, waits for /healthz, talks to the HTTP API, and stops the agent
with SIGTERM or SIGKILL. `cleanup()` deletes every pod through the API, stops the agent, kills
what is left in the test's own cgroup root and removes it from every hierarchy.

What the kernel says (processes, cgroup files) is read by kernel_view.py, not asked of the code
under test. Waiting is always polling against a deadline (`poll_until`); nothing sleeps a fixed
time and then asserts.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kernel_view import CgroupFiles, container_id_parts, is_running, proc_stat  # noqa: F401 (re-exported)

from nodeagent.agent.cgroups.detect import make_driver
from nodeagent.agent.runtime.oci.runtime import cgroup_mounts

T = TypeVar("T")
NODE_NAME = "it-node"
KUBE_RESERVED = {"cpu": "100m", "memory": "64Mi"}
SYSTEM_RESERVED = {"cpu": "100m", "memory": "64Mi"}
HOUSEKEEPING_S = 1.0
START_TIMEOUT_S = 60.0  # the UML guest imports the agent from hostfs: a few seconds


def poll_until(fn: Callable[[], T], timeout: float, what: str | Callable[[], str], interval: float = 0.05) -> T:
    """fn()'s first truthy value; AssertionError naming `what` (and the last value) at the deadline.
    A callable `what` is called then, so an agent's log tail in it is the log at the failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said}; last value: {value!r}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_loopback_up() -> None:
    """The UML guest boots with `lo` down, so nothing can reach 127.0.0.1. Bring it up there.

    Only acts when the interface is down (never the case on a normal host).
    """
    try:
        flags = int(Path("/sys/class/net/lo/flags").read_text().strip(), 16)
    except (OSError, ValueError):
        return
    if not flags & 0x1:  # IFF_UP
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def sweep_unmanaged(root: str) -> list[str]:
    """rmdir the empty directories under `root` (a test's own cgroup root) in every cgroup
    hierarchy, deepest first; the ones still there are returned. runc (the image pods) makes the
    container's path in the v1 hierarchies the driver does not manage (blkio, cpuset, devices,
    freezer, systemd, the hybrid unified one), and the agent removes only the pod's part of it
    there, so the test's root would stay behind. A directory in use or not empty stays."""
    tops = [os.path.join(m, root.strip("/")) for m in cgroup_mounts()]
    for top in tops:
        for d, _, _ in sorted(os.walk(top, topdown=False), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(d)
    return [d for d in tops if os.path.isdir(d)]


# ---- manifests and statuses ----


def pod_manifest(
    name: str,
    script: str | list[str],
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    restart: str = "Always",
    grace: int | None = None,
    uid: str | None = None,
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A one-container pod running `script` with /bin/sh -c (or an argv list), or `containers`."""
    if containers is None:
        command = ["/bin/sh", "-c", script] if isinstance(script, str) else script
        resources: dict[str, Any] = {}
        if requests:
            resources["requests"] = requests
        if limits:
            resources["limits"] = limits
        containers = [{"name": "main", "command": command, "resources": resources}]
    spec: dict[str, Any] = {"containers": containers, "restartPolicy": restart}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if uid is not None:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def container_status(pod: dict[str, Any], name: str = "main") -> dict[str, Any]:
    for cs in pod.get("status", {}).get("containerStatuses", []):
        if cs["name"] == name:
            return dict(cs)
    raise AssertionError(f"no status for container {name} in {pod.get('status')}")


def running_pid(pod: dict[str, Any] | None, name: str = "main") -> tuple[int, int] | None:
    """(pid, start time) of a running container, else None."""
    if not pod:
        return None
    if not any(c.get("name") == name for c in pod.get("status", {}).get("containerStatuses", [])):
        return None  # admitted and recorded, its worker not yet reporting (durable create answers first)
    cs = container_status(pod, name)
    if "running" not in cs["state"] or not cs.get("containerID"):
        return None
    return container_id_parts(cs["containerID"])


# ---- the agent ----


class AgentProcess:
    def __init__(self, workdir: Path, cgroup_version: int, *, static_pods: bool = False,
                 extra_config: dict[str, Any] | None = None, node_name: str = NODE_NAME) -> None:
        self.workdir = workdir
        self.node_name = node_name
        self.state_dir = workdir / "state"
        self.static_dir = workdir / "manifests" if static_pods else None
        self.config_path = workdir / "config.yaml"
        self.log_path = workdir / "agent.log"
        self.cgroup_root = f"/nodeagent-it-{secrets.token_hex(4)}"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.driver = make_driver(f"v{cgroup_version}", self.cgroup_root)
        self.cg = CgroupFiles(self.driver)
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_config = extra_config or {}
        self._write_config()

    def _write_config(self) -> None:
        token_file = self.workdir / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        config: dict[str, Any] = {
            "apiVersion": "nodeagent.io/v1alpha1",
            "kind": "NodeAgentConfiguration",
            "nodeName": self.node_name,  # the UML guest's hostname "(none)" is not a valid node name
            "address": "127.0.0.1",
            "port": self.port,
            "authentication": {"tokenFile": str(token_file)},
            "unixSocket": None,
            "stateDir": str(self.state_dir),
            "cgroupRoot": self.cgroup_root,
            "housekeepingInterval": f"{HOUSEKEEPING_S:g}s",
            "kubeReserved": KUBE_RESERVED,
            "systemReserved": SYSTEM_RESERVED,
            # only memory: the disk signals would depend on how full the test machine's disk is
            "evictionHard": {"memory.available": "50Mi"},
            "logging": {"level": "info", "format": "json"},
        }
        if self.static_dir is not None:
            self.static_dir.mkdir(exist_ok=True)
            config["staticPodPath"] = str(self.static_dir)
        config.update(self.extra_config)
        self.config_path.write_text(json.dumps(config, indent=1))  # JSON is YAML

    # -- lifecycle --

    def start(self, fault: str | None = None) -> None:
        """Start and wait for /healthz; `fault` arms NODEAGENT_FAULT (daemonkit/faults.py) in the agent."""
        assert self.proc is None or self.proc.poll() is not None, "agent already running"
        ensure_loopback_up()
        env = {k: v for k, v in os.environ.items() if k != "NODEAGENT_FAULT"}
        if fault:
            env["NODEAGENT_FAULT"] = fault
        with open(self.log_path, "ab") as log:
            log.write(f"---- agent start (fault {fault}) ----\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nodeagent", "run", "--config", str(self.config_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.request("GET", "/healthz", auth=False)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.proc.send_signal(signal.SIGUSR1)  # daemonkit/stackdump.py: threads' and tasks' stacks
                time.sleep(2)
                raise AssertionError(f"agent not healthy after {START_TIMEOUT_S}s:\n{self.log_tail(150)}")
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait: the agent lets go of its pods (they keep running). Its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"agent ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None
        return self.proc.returncode

    def crash(self) -> None:
        """kill -9: no shutdown code runs at all."""
        assert self.proc is not None and self.proc.poll() is None
        self.proc.kill()
        self.proc.wait()

    def past_shim(self, pid: int) -> bool:
        """The process has exec'd its command. Before that it is the agent's vfork child (same
        cmdline as the agent), half-way through an exec (empty cmdline: the agent resumes from
        vfork before the new image has its arguments) or the runtime's shim, which joins the
        cgroups and sets the oom_score_adj first: until then the PID holds the agent's values."""
        assert self.proc is not None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            agent_cmdline = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return False
        return bool(cmdline) and b"nodeagent-shim" not in cmdline and cmdline != agent_cmdline

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def cleanup(self) -> None:
        """Delete pods through the API, stop the agent, kill and remove the test cgroup root."""
        problems = []
        try:
            if self.static_dir is not None:
                for f in self.static_dir.iterdir():
                    f.unlink()
            if self.alive:
                for pod in self.pods():
                    meta = pod["metadata"]
                    if meta.get("namespace"):  # not an InvalidManifest entry
                        self.delete(meta["name"], meta["namespace"], grace=0)
                poll_until(lambda: not [p for p in self.pods() if p["metadata"].get("namespace")],
                           30, "every pod to be removed")
        except (AssertionError, OSError) as e:
            problems.append(f"pod deletion: {e}")
        if self.alive:
            try:
                self.stop()
            except AssertionError as e:
                problems.append(str(e))
        self.driver.kill("")  # only processes inside this test's own cgroup root
        self.driver.remove("")
        left = self.cg.exists("")
        stray = sweep_unmanaged(self.cgroup_root)  # what runc made where the driver does not manage
        assert not left, f"{self.cgroup_root} left behind: {left}"
        assert not stray, f"{self.cgroup_root} left behind in an unmanaged hierarchy: {stray}"
        assert not problems, "; ".join(problems) + "\n" + self.log_tail()

    # -- HTTP --

    def request(self, method: str, path: str, body: bytes | None = None, *,
                content_type: str = "application/json", auth: bool = True,
                timeout: float = 15.0) -> tuple[int, Any]:
        """(status, decoded JSON or text). HTTP errors are returned, not raised."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", content_type)
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        if "json" in ctype:
            return status, json.loads(raw)
        return status, raw.decode(errors="replace")

    def create(self, manifest: dict[str, Any]) -> tuple[int, Any]:
        return self.request("POST", "/api/v1/pods", json.dumps(manifest).encode())

    def create_ok(self, manifest: dict[str, Any]) -> dict[str, Any]:
        status, body = self.create(manifest)
        assert status == 201, (status, body)
        return dict(body)

    def pods(self) -> list[dict[str, Any]]:
        status, body = self.request("GET", "/api/v1/pods")
        assert status == 200, (status, body)
        return list(body["items"])

    def pod(self, name: str, ns: str = "default") -> dict[str, Any] | None:
        status, body = self.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if status == 404:
            return None
        assert status == 200, (status, body)
        return dict(body)

    def delete(self, name: str, ns: str = "default", grace: int | None = None) -> tuple[int, Any]:
        query = "" if grace is None else f"?gracePeriodSeconds={grace}"
        return self.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}{query}")

    def node(self) -> dict[str, Any]:
        status, body = self.request("GET", "/api/v1/node")
        assert status == 200, (status, body)
        return dict(body)

    def wait_running(self, name: str, timeout: float = 20.0, container: str = "main") -> tuple[int, int]:
        """(pid, start time) once the container runs its command (past the runtime's shim)."""
        def ready() -> tuple[int, int] | None:
            proc = running_pid(self.pod(name), container)
            return proc if proc and self.past_shim(proc[0]) else None

        return poll_until(ready, timeout, f"{name}/{container} to run its command")

    # -- the kernel's view of the agent's pods --

    def pod_cgroups(self) -> dict[str, list[str]]:
        """uid -> the `pod<uid>` directories that exist under kubepods and its QoS tiers, on every
        hierarchy (v1 has one per controller, and a directory left in any of them counts). Read
        from cgroupfs, not asked of the agent."""
        found: dict[str, list[str]] = {}
        for controller in self.cg.bases:
            for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
                parent = self.cg.dir(tier, controller or "memory")
                try:
                    names = os.listdir(parent)
                except FileNotFoundError:
                    continue
                for name in names:
                    if name.startswith("pod") and os.path.isdir(os.path.join(parent, name)):
                        found.setdefault(name[len("pod"):], []).append(os.path.join(parent, name))
        return found

    def pod_processes(self) -> dict[str, set[int]]:
        """uid -> the PIDs in its pod cgroup and below (its containers), read from cgroupfs (the
        memory hierarchy on v1), for every pod cgroup of this agent."""
        out: dict[str, set[int]] = {}
        for uid, dirs in self.pod_cgroups().items():
            base = self.cg.bases[""] if self.cg.version == 2 else self.cg.bases["memory"]
            for d in dirs:
                if d.startswith(base + "/"):
                    out[uid] = self.cg.pids(os.path.relpath(d, os.path.join(base, self.cg.root)))
        return out
