"""Helpers for the eviction integration tests and benchmarks: memory hogs, disk fillers, signals
read from the kernel, deaths watched through pidfds, small tmpfs filesystems.

Memory hogs run as pods (`python3 -I -S -c HOG_SCRIPT <ctl dir> <name>`) and are steered through
files in a control directory, so the test can size them AFTER every interpreter is up and the
headroom left above a threshold is known:

    <name>.ready   written by the hog once it runs (its pid)
    <name>.go      written by the test: JSON {"total", "step", "interval", "cross", "ignore_term"}
    <name>.cross   monotonic time at which the hog's allocated total reached `cross` bytes
                   (the crossing step is split there, so the stamp is the crossing itself)
    <name>.crossbin  with a signal probe instead: the start of the chunk in which the signal
                   itself went below its threshold (a double in a shared mapping, see Hogs.go)
    <name>.done    written once `total` bytes are allocated and touched
    <name>.term    monotonic time of the first SIGTERM (the hog exits on it unless ignore_term)

CLOCK_MONOTONIC is one clock for every process of a kernel, so the hog's stamps, the test's and
the agent's times compare directly.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_harness import AgentProcess, poll_until

MI = 1 << 20
PYTHON = "/usr/bin/python3"

HOG_SCRIPT = r"""
import json, os, signal, sys, time
d, name = sys.argv[1], sys.argv[2]
cfg = {}
def stamp(kind, text):
    tmp = os.path.join(d, name + "." + kind + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(d, name + "." + kind))
def on_term(*_):
    if not os.path.exists(os.path.join(d, name + ".term")):
        stamp("term", repr(time.monotonic()))
    if not cfg.get("ignore_term"):
        os._exit(143)
signal.signal(signal.SIGTERM, on_term)
with open("/proc/self/comm", "w") as f:
    f.write("evict-hog")  # one name to match (earlyoom --prefer), not every python3
if len(sys.argv) > 3:  # outside a pod (earlyoom comparison): the first victim of any OOM killer
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write(sys.argv[3])
stamp("ready", str(os.getpid()))
go = os.path.join(d, name + ".go")
while not os.path.exists(go):
    time.sleep(0.01)
with open(go) as f:
    cfg.update(json.load(f))
total, step, interval = int(cfg["total"]), int(cfg["step"]), float(cfg["interval"])
cross = cfg.get("cross")
probe = cfg.get("probe")
if probe is not None:  # near the line every chunk costs a pread and a store, no file writes
    import mmap, struct
    sfd = os.open(os.path.join(d, name + ".crossbin"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(sfd, 8)
    smap = mmap.mmap(sfd, 8)
    ffd = os.open(probe["file"], os.O_RDONLY)
    ufd = os.open(probe["usage"], os.O_RDONLY) if "usage" in probe else None
def available():
    vals = {}
    for line in os.pread(ffd, 1 << 16, 0).decode().splitlines():
        k, _, v = line.replace(":", " ").partition(" ")
        vals[k] = int(v.split()[0])
    if ufd is not None:
        return probe["limit"] - max(0, int(os.pread(ufd, 64, 0)) - vals[probe["inactive"]])
    if probe.get("key"):
        return vals[probe["key"]] * 1024
    return (vals["MemFree"] + vals["Inactive(file)"]) * 1024
held, have = [], 0
while have < total:
    n = min(step, total - have)
    if probe is not None and cross is not None and have + n > cross - probe["window"]:
        # near the line: small chunks, and before each the time, as long as the signal is above
        # the threshold; the last stamp is the start of the chunk that crossed (the hog may be
        # throttled or killed inside it, so the stamp cannot come after)
        if have < cross - probe["window"]:
            n = cross - probe["window"] - have
        else:
            if available() < probe["threshold"]:
                cross = None
                continue
            n = min(probe["chunk"], total - have)
            struct.pack_into("d", smap, 0, time.monotonic())
            held.append(b"\x01" * n)
            have += n
            continue
    elif cross is not None and probe is None and have < cross < have + n:
        n = cross - have
    held.append(b"\x01" * n)
    have += n
    if cross is not None and probe is None and have == cross:
        stamp("cross", repr(time.monotonic()))
        cross = None
    if interval > 0 and have < total:
        time.sleep(interval)
stamp("done", str(have))
while True:
    time.sleep(3600)
"""

# Writes `count` files of `size` bytes each into <dir>/data (created), then exits or sleeps.
FILL_SCRIPT = r"""
import os, sys, time
d, count, size, then = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = os.path.join(d, "data")
os.makedirs(data, exist_ok=True)
block = b"\x01" * min(size, 1 << 20)
for i in range(count):
    with open(os.path.join(data, "f%d" % i), "wb") as f:
        left = size
        while left > 0:
            left -= f.write(block[:left])
with open(os.path.join(data, "..", "filled"), "w") as f:
    f.write("%d %d" % (count, size))
if then == "sleep":
    while True:
        time.sleep(3600)
"""


# ---- the agent ----


class EvictionAgent(AgentProcess):
    """AgentProcess whose cleanup tolerates evicted pods that stay listed after DELETE.

    pods/manager.py delete_pod only terminates pods that are not terminal yet, so an evicted pod
    (terminal, stopped) is never removed from the list; the harness's cleanup would wait 30 s for
    it and fail. Here such pods are deleted too, then only the others must disappear.
    """

    def cleanup(self) -> None:
        if self.alive:
            try:
                for pod in self.pods():
                    meta = pod["metadata"]
                    if meta.get("namespace"):
                        self.delete(meta["name"], meta["namespace"], grace=0)
                poll_until(lambda: not [p for p in self.pods() if p["metadata"].get("namespace")
                                        and p["status"].get("reason") != "Evicted"], 30, "every pod to be removed")
            except (AssertionError, OSError):
                pass  # the harness's cleanup reports it
            evicted = [p for p in self.pods() if p["status"].get("reason") == "Evicted"] if self.alive else []
            if evicted:
                self.stop()  # nothing runs in the evicted pods; the harness removes the cgroup root
        super().cleanup()


# ---- manifests ----


def hog_manifest(name: str, ctl: Path, *, requests: dict[str, str] | None = None,
                 limits: dict[str, str] | None = None, priority_class: str | None = None,
                 grace: int = 30, uid: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "command": [PYTHON, "-I", "-S", "-c", HOG_SCRIPT, str(ctl), name],
                        "resources": resources}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def fill_manifest(name: str, uid: str, pod_dir: str, *, count: int, size: int, then: str,
                  requests: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod writing `count` files of `size` bytes under its own pod directory; then "exit" or "sleep"."""
    resources = {"requests": requests} if requests else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "main", "resources": resources,
                                 "command": [PYTHON, "-I", "-S", "-c", FILL_SCRIPT, pod_dir, str(count), str(size),
                                             then]}],
                 "restartPolicy": "Never", "terminationGracePeriodSeconds": 1},
    }


def pod_dir(agent: AgentProcess, name: str, uid: str, namespace: str = "default") -> str:
    """Where the agent keeps the pod's logs and writable data (its ephemeral storage)."""
    return os.path.join(str(agent.state_dir), "pods", f"{namespace}_{name}_{uid}")


# ---- hog control ----


class Hogs:
    """Steers hog pods through their control directory."""

    def __init__(self, ctl: Path) -> None:
        self.ctl = ctl
        ctl.mkdir(parents=True, exist_ok=True)

    def path(self, name: str, kind: str) -> Path:
        return self.ctl / f"{name}.{kind}"

    def ready(self, name: str, timeout: float = 60.0) -> int:
        """The hog's pid once its interpreter runs and waits for its go file."""
        return int(poll_until(lambda: self._read(name, "ready"), timeout, f"hog {name} to start"))

    def go(self, name: str, total: int, *, step: int = 8 * MI, interval: float = 0.0, cross: int | None = None,
           ignore_term: bool = False, probe: dict[str, Any] | None = None) -> None:
        """Allocate `total` bytes, `step` at a time with `interval` s pauses. With `cross`, stamp
        <name>.cross when the total reaches it; with a `probe` (see `signal_probe`) too, stamp
        instead the start of the small chunk during which the signal itself went below its
        threshold, probing from `cross` - window on."""
        cfg = {"total": int(total), "step": int(step), "interval": interval,
               "cross": int(cross) if cross is not None else None, "ignore_term": ignore_term, "probe": probe}
        tmp = self.path(name, "go.tmp")
        tmp.write_text(json.dumps(cfg))
        tmp.rename(self.path(name, "go"))

    def _read(self, name: str, kind: str) -> str | None:
        try:
            return self.path(name, kind).read_text() or None
        except FileNotFoundError:
            return None

    def stamp(self, name: str, kind: str) -> float | None:
        if kind == "cross" and self.path(name, "crossbin").exists():  # a probing hog's stamp
            (value,) = struct.unpack("d", self.path(name, "crossbin").read_bytes()[:8])
            return float(value) or None
        text = self._read(name, kind)
        return float(text) if text else None

    def wait(self, name: str, kind: str, timeout: float) -> str:
        return poll_until(lambda: self._read(name, kind), timeout, f"{name}.{kind}")

    def allocate(self, name: str, total: int, timeout: float = 60.0, **kw: Any) -> None:
        """Allocate and wait until the hog holds `total` bytes."""
        self.go(name, total, **kw)
        self.wait(name, "done", timeout)


# ---- signals, read from the kernel the way the agent defines them ----


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            parts = rest.split()
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def node_memory_available() -> int:
    """memory.available = MemTotal - (MemTotal - MemFree - Inactive(file)) = MemFree + Inactive(file)."""
    m = meminfo()
    return m["MemTotal"] - max(0, m["MemTotal"] - m["MemFree"] - m["Inactive(file)"])


def kubepods_memory(agent: AgentProcess) -> tuple[int, int]:
    """(enforced limit, working set) of the agent's kubepods cgroup, read from its files."""
    cg = agent.cg
    if cg.version == 2:
        limit_text = cg.read("kubepods", "memory", "memory.max")
        usage = int(cg.read("kubepods", "memory", "memory.current"))
        inactive = cg.keyed("kubepods", "memory", "memory.stat")["inactive_file"]
    else:
        limit_text = cg.read("kubepods", "memory", "memory.limit_in_bytes")
        usage = int(cg.read("kubepods", "memory", "memory.usage_in_bytes"))
        inactive = cg.keyed("kubepods", "memory", "memory.stat")["total_inactive_file"]
    limit = 1 << 62 if limit_text == "max" else int(limit_text)
    return limit, max(0, usage - inactive)


def memory_signal_available(agent: AgentProcess, signal: str) -> int:
    if signal == "memory.available":
        return node_memory_available()
    limit, ws = kubepods_memory(agent)
    return limit - ws


def signal_probe(agent: AgentProcess | None, signal: str, threshold: int, *, kubepods_dir: str | None = None,
                 version: int | None = None, window: int = 32 * MI, chunk: int = 256 << 10) -> dict[str, Any]:
    """What a hog needs to read `signal` itself (see Hogs.go): node meminfo, or kubepods files."""
    probe: dict[str, Any] = {"threshold": threshold, "window": window, "chunk": chunk}
    if signal == "memory.available":
        return {**probe, "file": "/proc/meminfo"}
    if signal == "MemAvailable":  # what earlyoom watches
        return {**probe, "file": "/proc/meminfo", "key": "MemAvailable"}
    if agent is not None:
        kubepods_dir, version = agent.cg.dir("kubepods"), agent.cg.version
    assert kubepods_dir is not None and version is not None
    v2 = version == 2
    limit_text = Path(kubepods_dir, "memory.max" if v2 else "memory.limit_in_bytes").read_text().strip()
    return {**probe, "file": os.path.join(kubepods_dir, "memory.stat"),
            "usage": os.path.join(kubepods_dir, "memory.current" if v2 else "memory.usage_in_bytes"),
            "inactive": "inactive_file" if v2 else "total_inactive_file",
            "limit": 1 << 62 if limit_text == "max" else int(limit_text)}


def statvfs_available(path: str) -> tuple[int, int]:
    """(bytes available, inodes free) as the nodefs signals see them."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_favail


# ---- deaths, conditions, events ----


class DeathWatch:
    """Records the monotonic time a process dies (pidfd readable), from a thread of its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd = os.pidfd_open(pid)
        self.died_at: float | None = None
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not poller.poll(1000):
            pass
        self.died_at = time.monotonic()
        os.close(self.fd)

    def wait(self, timeout: float) -> float:
        self._thread.join(timeout)
        assert self.died_at is not None, f"pid {self.pid} still alive after {timeout}s"
        return self.died_at

    @property
    def alive(self) -> bool:
        return self.died_at is None


def condition(agent: AgentProcess, kind: str) -> bool:
    for c in agent.node()["status"].get("conditions", []):
        if c["type"] == kind:
            return bool(c["status"] == "True")
    raise AssertionError(f"no {kind} condition in {agent.node()['status']}")


def evictions(agent: AgentProcess) -> list[dict[str, Any]]:
    """Eviction events, oldest first: pods that ran and were evicted. A pod refused at admission
    under pressure gets an Evicted event too (the kubelet's reason), worded "The node had condition"."""
    status, body = agent.request("GET", "/api/v1/events")
    assert status == 200, (status, body)
    return [e for e in body["items"] if e["reason"] == "Evicted" and not e["message"].startswith("The node had condition")]


def evicted_names(agent: AgentProcess) -> list[str]:
    return [e["involvedObject"]["name"] for e in evictions(agent)]


def assert_evicted(agent: AgentProcess, name: str, *words: str) -> dict[str, Any]:
    """The pod ended Failed / Evicted with the kubelet's message naming `words`."""
    pod = poll_until(lambda: (p := agent.pod(name)) and p["status"].get("reason") == "Evicted" and p, 30,
                     f"{name} to be evicted")
    status = pod["status"]
    assert status["phase"] == "Failed", status
    assert status["message"].startswith("The node was low on resource: "), status
    for w in words:
        assert w in status["message"], (w, status["message"])
    return dict(pod)


def log_events(agent: AgentProcess) -> list[dict[str, Any]]:
    """The agent's JSON log lines, in order."""
    out = []
    for line in agent.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# ---- filesystems ----


@contextmanager
def tmpfs(path: Path, *, size: str, nr_inodes: int | None = None) -> Iterator[Path]:
    """A small tmpfs of our own at `path` (created), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0700" + (f",nr_inodes={nr_inodes}" if nr_inodes else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "nodeagent-it", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)
