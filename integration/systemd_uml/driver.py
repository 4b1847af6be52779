#!/usr/bin/python3
"""Guest side of integration/test_systemd_uml.py: a oneshot unit under systemd 252 (PID 1) in the
User-Mode-Linux guest booted by boot.sh. Usage: driver.py D

Drives the real nodeagent.service with systemctl (start, reload, restart, a watchdog timeout) and
records what systemd, the agent's HTTP API, the journal and the kernel (/proc, cgroupfs) say into
D/results.json; D/journal.txt gets the whole journal, D/rc this script's exit status (0: ran to
the end). The verdicts are the host test's, except where a step cannot go on (the agent never
became active, the pod never ran): then "error" says why and the status is 1.

Standard library only, run by /usr/bin/python3: nothing of the project is imported here, so the
observations do not depend on the code under test. Every systemctl call costs ~0.3 s in the
guest; polls are few and bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC
from typing import Any, TypeVar

T = TypeVar("T")
D = sys.argv[1]
UNIT = "nodeagent.service"
PORT = 10250
API = f"http://127.0.0.1:{PORT}"
TOKEN = "sdu-" + os.urandom(12).hex()
TOKEN_FILE = "/run/nodeagent-it-token"  # guest tmpfs
CONFIG_PATH = f"{D}/config.json"  # the path the drop-in's ExecStart names
CG = "/sys/fs/cgroup"
MiB = 1024 * 1024
# Configuration changed by the reload step: allocatable memory drops by 32Mi + 100Mi, and the
# kubepods cgroup's memory.max (capacity - kubeReserved - systemReserved) by 32Mi.
RELOAD_SYSTEM_RESERVED_MEMORY = ("64Mi", "96Mi")
RELOAD_EVICTION_HARD_MEMORY = ("50Mi", "150Mi")

results: dict[str, Any] = {}
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy for 127.0.0.1


class Abort(Exception):
    """A step that later steps depend on did not happen."""


def now() -> float:
    return time.monotonic()


def poll(fn: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    deadline = now() + timeout
    while True:
        value = fn()
        if value:
            return value
        if now() > deadline:
            raise Abort(f"timed out after {timeout}s waiting for {what}; last value: {value!r}")
        time.sleep(interval)


# ---- systemd ----


def systemctl(*args: str, timeout: float = 120) -> tuple[int, float, str]:
    """(exit status, seconds it took, stdout+stderr)."""
    t0 = now()
    p = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, now() - t0, (p.stdout + p.stderr).strip()


SHOW = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "StatusText", "ControlGroup",
        "ExecMainStatus", "ExecMainCode", "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic",
        "ActiveEnterTimestamp", "WatchdogUSec", "Type", "FragmentPath", "DropInPaths", "KillMode", "Delegate")


def show(*props: str) -> dict[str, str]:
    args = ["show", UNIT, "--timestamp=us+utc"]
    for p in props or SHOW:
        args += ["-p", p]
    rc, _, out = systemctl(*args)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal() -> list[dict[str, Any]]:
    """The unit's journal entries of this boot, in journal order (the agent's lines and PID 1's)."""
    out = subprocess.run(["journalctl", "-b", "-u", UNIT, "-o", "json", "--no-pager"],
                         capture_output=True, text=True, timeout=60).stdout
    entries = []
    for line in out.splitlines():
        e = json.loads(line)
        msg = e.get("MESSAGE", "")
        if isinstance(msg, list):  # non-UTF-8 message: a byte array
            msg = bytes(msg).decode(errors="replace")
        entries.append({"message": msg, "pid": e.get("_PID"), "realtime_us": int(e["__REALTIME_TIMESTAMP"]),
                        "monotonic_us": int(e["__MONOTONIC_TIMESTAMP"])})
    return entries


def agent_event(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The agent's structlog JSON line (logging.format auto = JSON when stderr is not a tty)."""
    try:
        ev = json.loads(entry["message"])
    except ValueError:
        return None
    return ev if isinstance(ev, dict) and "event" in ev else None


def iso_to_us(ts: str) -> int:
    """structlog's ISO UTC timestamp ('2026-11-29T18:13:40.123456Z') -> µs since the epoch."""
    from datetime import datetime
    dt = datetime.strptime(ts.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


def show_time_to_us(value: str) -> int:
    """`systemctl show --timestamp=us+utc` ('Sun 2026-11-29 18:13:40.123456 UTC') -> µs since the epoch."""
    from datetime import datetime
    dt = datetime.strptime(value, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


# ---- the agent's API ----


def http(method: str, path: str, body: Any = None, *, auth: bool = True, timeout: float = 10) -> tuple[int, Any]:
    """(status, JSON or text); connection errors raise OSError."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if auth:
        req.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, (json.loads(raw) if "json" in ctype else raw.decode(errors="replace"))


def healthz_once() -> Any:
    """One GET /healthz, no retry: (status, body) or the connection error's text."""
    try:
        return list(http("GET", "/healthz", auth=False, timeout=5))
    except OSError as e:
        return f"error: {e}"


_SUFFIX = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "": 1}


def quantity_bytes(q: str) -> int:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|)", q)
    if not m:
        raise ValueError(f"unexpected memory quantity {q!r}")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def allocatable_memory() -> int:
    status, node = http("GET", "/api/v1/node")
    assert status == 200, (status, node)
    return quantity_bytes(node["status"]["allocatable"]["memory"])


def hard_memory_threshold() -> float | None:
    """nodeagent_eviction_threshold_bytes{kind="hard",signal="memory.available"} from /metrics."""
    status, text = http("GET", "/metrics")
    for line in str(text).splitlines():
        if line.startswith("nodeagent_eviction_threshold_bytes{") and 'kind="hard"' in line \
                and 'signal="memory.available"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def pod() -> dict[str, Any] | None:
    """The test pod as the API reports it; None if it has no such pod or does not answer."""
    try:
        status, body = http("GET", "/api/v1/namespaces/default/pods/survivor")
    except OSError:
        return None
    return body if status == 200 else None


def containers(p: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """name -> {state, containerID, restartCount} as the API reports them."""
    out = {}
    for cs in (p or {}).get("status", {}).get("containerStatuses", []):
        out[cs["name"]] = {"state": next(iter(cs.get("state") or {"?": 0})), "containerID": cs.get("containerID", ""),
                           "restartCount": cs.get("restartCount")}
    return out


# ---- the kernel ----


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in ticks since boot): (pid, start time) names a process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2:].split()[22 - 3])


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()[0].decode()


def proc_cgroup(pid: int) -> str | None:
    try:
        return open(f"/proc/{pid}/cgroup").read().strip().split("::", 1)[1]
    except (OSError, IndexError):
        return None


def cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def kernel_view(container_ids: dict[str, str]) -> dict[str, Any]:
    """For each container's process (from its containerID nodeagent://<pid>@<start>): is that very
    process alive (same start time), its command line and its cgroup, read from /proc."""
    out = {}
    for name, cid in container_ids.items():
        pid, start = (int(x) for x in cid.removeprefix("nodeagent://").split("@"))
        out[name] = {"pid": pid, "start": start, "alive": start_time(pid) == start, "cmdline": cmdline(pid),
                     "cgroup": proc_cgroup(pid)}
    return out


def read(path: str) -> str | None:
    try:
        return open(path).read().strip()
    except OSError as e:
        return f"<{e.strerror}>"


def service_cgroup(control_group: str) -> dict[str, Any]:
    d = CG + control_group
    try:
        subdirs = sorted(e.name for e in os.scandir(d) if e.is_dir())
    except OSError:
        subdirs = None
    procs = read(f"{d}/cgroup.procs")
    return {"path": control_group, "subtree_control": read(f"{d}/cgroup.subtree_control"),
            "controllers": read(f"{d}/cgroup.controllers"), "subdirs": subdirs,
            "procs": [int(x) for x in procs.split()] if procs and procs[0].isdigit() else procs}


def kubepods_memory() -> dict[str, int | str | None]:
    def value(name: str) -> int | str | None:
        v = read(f"{CG}/kubepods/{name}")
        return int(v) if v and v.isdigit() else v
    return {"max": value("memory.max"), "high": value("memory.high")}


# ---- the steps ----


def write_config(system_reserved: str, eviction_hard: str) -> None:
    config = {
        "apiVersion": "nodeagent.io/v1alpha1", "kind": "NodeAgentConfiguration",
        "nodeName": "uml-systemd",  # fixed: not whatever hostname the guest has ("(none)" before systemd)
        "address": "127.0.0.1", "port": PORT,
        "authentication": {"tokenFile": TOKEN_FILE},  # writes over TCP with a bearer token
        "stateDir": "/run/nodeagent-it",  # guest tmpfs: survives agent restarts, not the guest
        "cgroupRoot": "/",  # the real layout: a top-level kubepods tree, outside the service's cgroup
        "cgroupDriver": "auto",  # v2: the guest's only hierarchy
        "housekeepingInterval": "2s",
        "kubeReserved": {"cpu": "100m", "memory": "64Mi"},
        "systemReserved": {"cpu": "100m", "memory": system_reserved},
        # memory only: disk signals would measure the host's filesystems through hostfs
        "evictionHard": {"memory.available": eviction_hard},
        "logging": {"level": "info", "format": "auto"},  # auto: JSON lines into the journal
    }
    tmp = CONFIG_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=1)
    os.replace(tmp, CONFIG_PATH)


POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "survivor", "namespace": "default"},
    "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 1, "containers": [
        {"name": "main", "command": ["/bin/sleep", "100000"],
         "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}},
        {"name": "side", "command": ["/bin/sh", "-c", "while :; do sleep 1; done"],
         "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}},
    ]},
}


def pod_snapshot() -> dict[str, Any]:
    p = pod()
    cs = containers(p)
    return {"phase": (p or {}).get("status", {}).get("phase"), "containers": cs,
            "kernel": kernel_view({n: c["containerID"] for n, c in cs.items() if c["containerID"]})}


def step_preflight() -> None:
    with open(TOKEN_FILE, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(TOKEN_FILE, 0o600)
    write_config(RELOAD_SYSTEM_RESERVED_MEMORY[0], RELOAD_EVICTION_HARD_MEMORY[0])
    s = show("FragmentPath", "DropInPaths", "Type", "WatchdogUSec", "KillMode", "Delegate", "ActiveState")
    results["unit"] = s
    results["fragment"] = read(s.get("FragmentPath", "")) if s.get("FragmentPath") else None
    results["systemd_version"] = subprocess.run(["systemctl", "--version"], capture_output=True,
                                                text=True).stdout.splitlines()[0]
    results["kubepods_before_start"] = os.path.exists(f"{CG}/kubepods")


def step_start() -> None:
    rc, took, out = systemctl("start", UNIT)
    # Right after `systemctl start` returns, with no retry: for Type=notify that is after READY=1.
    health = healthz_once()
    s = show()
    r = results["start"] = {"rc": rc, "seconds": took, "output": out, "healthz": health, "show": s}
    if rc != 0 or s.get("ActiveState") != "active":
        raise Abort(f"systemctl start: rc={rc} {out!r}, ActiveState={s.get('ActiveState')}")
    r["main_pid"] = int(s["MainPID"])
    r["exec_to_active_s"] = (int(s["ActiveEnterTimestampMonotonic"])
                             - int(s["ExecMainStartTimestampMonotonic"])) / 1e6
    # The agent's own timestamp on its agent_ready line (taken before it sends READY=1), against
    # the moment systemd entered "active" and PID 1's "Started" line.
    entries = journal()
    ready = [(i, e, ev) for i, e in enumerate(entries) if (ev := agent_event(e)) and ev["event"] == "agent_ready"]
    started = [(i, e) for i, e in enumerate(entries) if e["message"].startswith("Started ")]
    r["active_enter_us"] = show_time_to_us(s["ActiveEnterTimestamp"])
    if ready:
        i, e, ev = ready[0]
        r["agent_ready"] = {"index": i, "agent_timestamp_us": iso_to_us(ev["timestamp"]), "pid": e["pid"],
                            "journal_realtime_us": e["realtime_us"]}
    if started:
        i, e = started[0]
        r["started_line"] = {"index": i, "message": e["message"], "journal_realtime_us": e["realtime_us"]}


def step_pod() -> None:
    # Already answering after a correct start; the wait only lets a broken start (a Type=simple
    # drop-in) go on to the later steps, so that every test reports on its own.
    poll(lambda: healthz_once() == [200, "ok"], 60, "the agent's API")
    status, body = http("POST", "/api/v1/pods", POD, auth=True)
    if status != 201:
        raise Abort(f"creating the pod: {status} {body}")

    def running() -> dict[str, Any] | None:
        snap = pod_snapshot()
        k = snap["kernel"]
        ok = (len(k) == 2 and all(c["state"] == "running" for c in snap["containers"].values())
              and all(v["alive"] and v["cmdline"].startswith(("/bin/sleep", "/bin/sh")) for v in k.values()))
        return snap if ok else None

    t0 = now()
    snap = poll(running, 30, "pod survivor to run both containers' commands", 0.2)
    results["pod"] = {"seconds": now() - t0, "snapshot": snap, "service_cgroup": service_cgroup(
        results["start"]["show"]["ControlGroup"])}


def step_reload() -> None:
    before = {"allocatable": allocatable_memory(), "threshold": hard_memory_threshold(),
              "kubepods": kubepods_memory(), "show": show("MainPID", "NRestarts", "ActiveState")}
    write_config(RELOAD_SYSTEM_RESERVED_MEMORY[1], RELOAD_EVICTION_HARD_MEMORY[1])
    rc, took, out = systemctl("reload", UNIT)
    # systemd 252 (Type=notify, not notify-reload) returns once `kill -HUP` has run: the agent may
    # still be reading the file, so note what the API says at once, then poll for the new value.
    at_return = allocatable_memory()
    expected = before["allocatable"] - 32 * MiB - 100 * MiB
    t0 = now()
    error, applied_s = None, None
    try:
        poll(lambda: allocatable_memory() == expected, 10, "the reloaded allocatable", 0.1)
        applied_s = took + (now() - t0)
    except Abort as e:
        error = str(e)
    entries = journal()
    results["reload"] = {
        "rc": rc, "seconds": took, "output": out, "applied_within_s": applied_s, "error": error, "before": before,
        "expected_allocatable": expected, "allocatable_at_return": at_return,
        "after": {"allocatable": allocatable_memory(), "threshold": hard_memory_threshold(),
                  "kubepods": kubepods_memory(), "show": show("MainPID", "NRestarts", "ActiveState")},
        "config_reloaded_events": [ev for e in entries if (ev := agent_event(e)) and ev["event"] == "config_reloaded"],
        "pod": pod_snapshot(),
    }


def step_restart() -> None:
    old = show()
    old_pid = int(old["MainPID"])
    t0_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000  # systemd's *TimestampMonotonic clock
    rc, took, out = systemctl("restart", UNIT)
    snap = pod_snapshot()  # at once: READY=1 comes after re-adoption
    health = healthz_once()
    s = show()
    results["restart"] = {"rc": rc, "seconds": took, "output": out, "old": old, "show": s, "healthz": health,
                          "stop_s": (int(s["ExecMainStartTimestampMonotonic"]) - t0_us) / 1e6,
                          "exec_to_active_s": (int(s["ActiveEnterTimestampMonotonic"])
                                               - int(s["ExecMainStartTimestampMonotonic"])) / 1e6,
                          "old_pid_alive": start_time(old_pid) is not None, "pod": snap,
                          "service_cgroup": service_cgroup(s["ControlGroup"]),
                          "journal_pid1": [e["message"] for e in journal() if e["pid"] == "1"]}
    if rc != 0 or s.get("ActiveState") != "active":
        raise Abort(f"systemctl restart: rc={rc} {out!r}, ActiveState={s.get('ActiveState')} Result={s.get('Result')}")


def step_watchdog() -> None:
    old = show()
    old_pid = int(old["MainPID"])
    t0_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    os.kill(old_pid, signal.SIGSTOP)  # the event loop (and every thread) stops: no more WATCHDOG=1
    t0 = now()
    # the signal takes effect when the agent next runs (in the 1-CPU guest, after this process
    # yields): read its state until it shows stopped, briefly; the test checks what it saw last
    deadline = time.monotonic() + 2.0
    while (stopped_state := proc_state(old_pid)) not in ("T", None) and time.monotonic() < deadline:
        time.sleep(0.005)

    def restarted() -> dict[str, str] | None:
        s = show("MainPID", "ActiveState", "SubState", "NRestarts", "Result")
        return s if s.get("MainPID") not in ("0", str(old_pid)) and s.get("ActiveState") == "active" else None

    try:
        new = poll(restarted, 60, "systemd to restart the stopped agent", 0.2)
    except Abort:
        os.kill(old_pid, signal.SIGCONT)  # never leave a stopped agent behind
        raise
    took = now() - t0
    snap = pod_snapshot()
    health = healthz_once()
    s = show()
    entries = journal()
    timeouts = [e for e in entries if e["pid"] == "1" and "Watchdog timeout" in e["message"]]
    results["watchdog"] = {
        "seconds": took, "old": old, "stopped_state": stopped_state, "first_new": new, "show": s, "healthz": health,
        # from SIGSTOP to: systemd's "Watchdog timeout" line, the new agent's exec, its READY=1
        "timeout_after_s": (timeouts[-1]["monotonic_us"] - t0_us) / 1e6 if timeouts else None,
        "exec_after_s": (int(s["ExecMainStartTimestampMonotonic"]) - t0_us) / 1e6,
        "active_after_s": (int(s["ActiveEnterTimestampMonotonic"]) - t0_us) / 1e6,
        "old_pid_alive": start_time(old_pid) is not None, "pod": snap,
        "service_cgroup": service_cgroup(s["ControlGroup"]),
        "journal": [e["message"] for e in entries if e["pid"] in (None, "1") and (
            "atchdog" in e["message"] or str(old_pid) in e["message"])],
    }


def step_supervised() -> None:
    """The agent restarted by the watchdog really supervises the re-adopted pod (not only reports
    its checkpoint): SIGKILL the main container's process; the agent sees the exit (pidfd) and
    restarts it at once (the first crash has no back-off)."""
    before = containers(pod())["main"]
    pid = int(before["containerID"].removeprefix("nodeagent://").split("@")[0])
    os.kill(pid, signal.SIGKILL)
    t0 = now()

    def restarted() -> dict[str, Any] | None:
        snap = pod_snapshot()
        c, k = snap["containers"].get("main", {}), snap["kernel"].get("main", {})
        return snap if (c.get("containerID") != before["containerID"] and c.get("state") == "running"
                        and k.get("alive") and k.get("cmdline", "").startswith("/bin/sleep")) else None

    snap = poll(restarted, 30, "the agent to restart the killed container", 0.2)
    results["supervised"] = {"seconds": now() - t0, "before": before, "pod": snap}


def finish() -> None:
    pid1 = [e["message"] for e in journal() if e["pid"] == "1"]
    results["final"] = {"journal_pid1": pid1, "watchdog_timeouts": sum("Watchdog timeout" in m for m in pid1),
                        "kubepods_exists": os.path.isdir(f"{CG}/kubepods")}


def main() -> int:
    rc = 1
    t_start = now()
    try:
        for step in (step_preflight, step_start, step_pod, step_reload, step_restart, step_watchdog,
                     step_supervised):
            step()
        rc = 0
    except Abort as e:
        results["error"] = str(e)
    except Exception:
        results["error"] = traceback.format_exc()
    finally:
        try:
            finish()
        except Exception:
            results["finish_error"] = traceback.format_exc()
            rc = 1
        results["driver_seconds"] = now() - t_start
        with open(f"{D}/results.json.tmp", "w") as f:
            json.dump(results, f, indent=1, default=str)
        os.replace(f"{D}/results.json.tmp", f"{D}/results.json")
        with open(f"{D}/journal.txt", "w") as f:
            subprocess.run(["journalctl", "-b", "--no-pager", "-o", "short-monotonic"], stdout=f, timeout=60)
        with open(f"{D}/rc", "w") as f:
            f.write(f"{rc}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
