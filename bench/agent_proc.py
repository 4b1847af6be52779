"""Start and stop a real `nodeagent run` process for the benchmarks, and clean up after it.

Each agent gets its own temporary stateDir, its own cgroup root `/nodeagent-bench-<random>` and a
free loopback port, so a benchmark never touches anything it did not create. `stop()` deletes the
pods it can still see through the API, stops the agent (SIGTERM, then SIGKILL of that PID only),
SIGKILLs whatever is left in the bench cgroup root and removes that root on every cgroup
hierarchy of the host (all v1 mounts, or the v2 mount), then the state directory.

Writes need the API's bearer token: the config names a 0600 token file and every request sends
`headers`. Also: `proc_times(pid)` / `vm_rss(pid)` (what the idle benchmark samples), `pct()` for
the percentiles, `MachineLoad` (how busy the whole machine was: figures from a shared host are
noisy), and `cgroup_rel()` / `memory_limit_file()` for "is this PID in its cgroup with its limit".

In the UML guest the loopback interface starts down: run `ip link set lo up` first.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import yaml

from nodeagent.agent.cgroups.detect import make_driver, parse_mounts

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A loopback port nobody listens on right now (the agent binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def proc_times(pid: int) -> tuple[float, float]:
    """(utime, stime) in seconds of every thread of `pid` (children not included)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    rest = data[data.rindex(b")") + 2 :].split()
    return int(rest[14 - 3]) / CLK_TCK, int(rest[15 - 3]) / CLK_TCK


def vm_rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    out = {"VmRSS": 0, "VmHWM": 0}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in out:
                out[key] = int(line.split()[1]) * 1024
    return out["VmRSS"], out["VmHWM"]


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat (busy: not idle, not iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    total = sum(fields[:8])  # guest time is already inside user/nice
    return total - fields[3] - fields[4], total


class MachineLoad:
    """How busy the whole machine was between start() and text(), besides what we measure:
    other work on a shared host makes latency figures noisy, so the benchmarks print it."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self.b0, self.t0 = cpu_ticks()

    def text(self, known_s: float = 0.0) -> str:
        b1, t1 = cpu_ticks()
        ncpu = os.cpu_count() or 1
        busy_s = (b1 - self.b0) / CLK_TCK
        wall_s = (t1 - self.t0) / CLK_TCK / ncpu
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        other = max(0.0, busy_s - known_s)
        return (f"machine: {busy_s:.2f} CPU-s busy in {wall_s:.2f} s on {ncpu} CPUs"
                f" ({other:.2f} CPU-s not counted above: containers' shims, kernel, other work); loadavg {load}")


def parse_container_id(cid: str) -> tuple[int, int] | None:
    """`nodeagent://<pid>@<starttime>` -> (pid, starttime)."""
    if not cid.startswith("nodeagent://"):
        return None
    pid, _, start = cid[len("nodeagent://") :].partition("@")
    return int(pid), int(start)


def container_id_of(pod: dict[str, Any]) -> str | None:
    for cs in pod.get("status", {}).get("containerStatuses", []) or []:
        cid = cs.get("containerID")
        if cid:
            return str(cid)
    return None


@dataclass
class AgentProc:
    """One agent process. `config_extra` overrides keys of the bench config (camelCase names)."""

    config_extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # added to the agent's environment
    keep_log: str | None = None  # copy the agent's log here on stop
    driver_kind: str = "auto"
    python: str = sys.executable
    root: str = field(default_factory=lambda: f"/nodeagent-bench-{secrets.token_hex(4)}")
    tmp: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="nodeagent-bench-"))
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.driver = make_driver(self.driver_kind, self.root)
        self.version = self.driver.version
        self.log_path = os.path.join(self.tmp, "agent.log")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """What every request sends: writes need the bearer token (as in production over TCP)."""
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def token_file(self) -> str:
        return os.path.join(self.tmp, "token")

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "apiVersion": "nodeagent.io/v1alpha1",
            "kind": "NodeAgentConfiguration",
            "nodeName": "bench",
            "address": "127.0.0.1",
            "port": self.port,
            "stateDir": os.path.join(self.tmp, "state"),
            "cgroupRoot": self.root,
            "cgroupDriver": f"v{self.version}",
            "maxPods": 110,
            "kubeReserved": {},
            "systemReserved": {},
            "authentication": {"tokenFile": self.token_file},
            "logging": {"level": "info", "format": "json"},
        }
        cfg.update(self.config_extra)
        return cfg

    def start(self, timeout: float = 30.0) -> None:
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token + "\n")
        path = os.path.join(self.tmp, "config.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(self.config(), f)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed after Popen
        try:
            self.proc = subprocess.Popen(
                [self.python, "-m", "nodeagent", "run", "--config", path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.tmp,
                env={**os.environ, **self.env},
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        last: OSError | None = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError as e:
                last = e
            if time.monotonic() > deadline:
                hint = ""
                if "unreachable" in str(last):
                    hint = " (loopback down? in the UML guest run `ip link set lo up` first)"
                raise RuntimeError(f"agent not ready after {timeout}s: {last}{hint}\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    # ---- talking to it (blocking; the benchmarks use aiohttp for what they time) ----
    def request(self, method: str, path: str, timeout: float = 30.0) -> Any:
        import json

        req = urllib.request.Request(self.url + path, method=method, headers=self.headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def pod_keys(self) -> list[tuple[str, str]]:
        items = self.request("GET", "/api/v1/pods")["items"]
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items]

    def delete_all_pods(self, timeout: float = 60.0) -> int:
        """DELETE every pod with gracePeriodSeconds=0 and wait until the list is empty; how many left."""
        for ns, name in self.pod_keys():
            try:
                self.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            left = len(self.pod_keys())
            if left == 0 or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    # ---- cgroup facts, computed from the mounts (not from the agent) ----
    def cgroup_rel(self, path: str) -> str:
        """How /proc/<pid>/cgroup names a cgroup of the agent: "/<root>/<path>"."""
        return f"{self.root}/{path}".replace("//", "/")

    def memory_limit_file(self, path: str) -> str:
        rel = self.cgroup_rel(path).lstrip("/")
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return os.path.join(str(self.driver.hierarchy("memory")), rel, name)

    # ---- teardown ----
    def stop(self) -> None:
        """Delete pods, stop the agent, kill and remove the bench cgroup root everywhere, rm state."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    left = self.delete_all_pods()
                    if left:
                        print(f"agent_proc: {left} pods still listed after delete", file=sys.stderr)
                except OSError as e:
                    print(f"agent_proc: deleting pods failed: {e}", file=sys.stderr)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            try:
                self.driver.kill("")
            except OSError as e:
                print(f"agent_proc: kill {self.root}: {e}", file=sys.stderr)
            remove_root_everywhere(self.root)
            if self.keep_log:
                shutil.copyfile(self.log_path, self.keep_log)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> AgentProc:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """`--agent-env KEY=VALUE` options (e.g. PYTHONPATH=/copy/of/tree to bench a patched agent)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--agent-env wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def remove_root_everywhere(root: str) -> None:
    """rmdir `root` and its subtree (children first) on every cgroup mount of this host.

    Only the bench's own uniquely named root is touched; the driver already killed its tasks.
    """
    with open("/proc/self/mounts") as f:
        text = f.read()
    mounts = parse_mounts(text)
    points = set(mounts.v1.values())
    for line in text.splitlines():  # named v1 hierarchies (name=systemd) and every cgroup2 mount
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            points.add(fields[1])
    for point in sorted(points):
        top = os.path.join(point, root.strip("/"))
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -t[0].count("/")):
            for _ in range(250):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
            else:
                print(f"agent_proc: could not remove {dirpath}", file=sys.stderr)
