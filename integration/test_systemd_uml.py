"""The real systemd/nodeagent.service under a real systemd: Debian 12's systemd 252 as PID 1 in a
User-Mode-Linux guest (pure cgroup v2), booted by integration/systemd_uml/boot.sh.

The guest gets the unit file byte for byte in /run/systemd/system plus one drop-in
(systemd_uml/units/nodeagent.service.d/50-integration.conf): ExecStart reset to this checkout's
venv and a config the guest driver writes, and WatchdogSec shortened from 30s to 5s, only to keep
the test fast. Everything else (Type=notify, NotifyAccess=main, Restart=always, RestartSec=2,
KillMode=process, Delegate=yes, ExecReload=kill -HUP) is the real unit's. The agent's config uses
the real cgroup layout (cgroupRoot "/": a top-level kubepods tree).

The guest driver (systemd_uml/driver.py, a oneshot unit, /usr/bin/python3 with the standard library
only) starts the agent, creates a two-container pod, reloads, restarts, stops the agent's main
process with SIGSTOP to trigger the watchdog, kills a container, and records what systemctl, the
agent's API, the journal and /proc + cgroupfs say in results.json; the assertions are here.

The watchdog step: the agent pings WATCHDOG=1 from its event loop (sdnotify.watchdog_loop), but
config reads and other blocking calls run in threads, so nothing outside the process can block the
loop alone. SIGSTOP on the main PID stops the whole process, so the loop makes no progress and the
pings stop, which is what a hung loop looks like to systemd; systemd then sends SIGABRT (and
SIGCONT) and restarts the unit.

One guest boot serves every test of this module (~20 s in all). To watch it fail, e.g.:
    NODEAGENT_SDU_EXTRA_DROPIN='[Service]\\nType=simple' .venv/bin/pytest integration/test_systemd_uml.py
Not collected inside the UML guest of `make integration-v2` (see conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
BOOT = HERE / "systemd_uml" / "boot.sh"
UNIT_FILE = CHECKOUT / "systemd" / "nodeagent.service"
UML_KERNEL = CHECKOUT / ".uml-work" / "root" / "usr" / "bin" / "linux.uml"
AGENT_BIN = Path(sys.executable).parent / "nodeagent"
BOOT_TIMEOUT_S = 240
MiB = 1024 * 1024
SERVICE_CGROUP = "/system.slice/nodeagent.service"
STATUS_TEXT = re.compile(r"^(\d+) pods \((\d+) running\); no pressure; API on 127\.0\.0\.1:10250$")


def _missing() -> str | None:
    if not Path("/lib/systemd/systemd").exists():
        return "no /lib/systemd/systemd on this machine: nothing to boot as PID 1 in the guest"
    if not Path("/usr/bin/python3").exists():
        return "no /usr/bin/python3 for the guest driver"
    if not UML_KERNEL.exists() and shutil.which("apt-get") is None:
        return f"no {UML_KERNEL} and no apt-get to download the user-mode-linux package"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.fixture(scope="module")
def guest(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Boot the guest once; the driver's results.json, plus `_boot_s` and `_diag` (for messages)."""
    d = Path(tempfile.mkdtemp(prefix="nodeagent-sdu-"))
    try:
        env = dict(os.environ)
        if AGENT_BIN.exists():
            env["NODEAGENT"] = str(AGENT_BIN)
        t0 = time.monotonic()
        with open(d / "console.txt", "wb") as console:
            proc = subprocess.Popen([str(BOOT), str(d)], stdout=console, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            rc: int | None = None
            try:
                rc = proc.wait(BOOT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass  # reported below: no results
            finally:  # timeout or interrupt: the UML kernel's host processes, our process group only
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        boot_s = time.monotonic() - t0

        def tail(name: str, lines: int = 60) -> str:
            try:
                return "\n".join((d / name).read_text(errors="replace").splitlines()[-lines:])
            except OSError:
                return "(none)"

        diag = f"\n--- console ---\n{tail('console.txt', 20)}\n--- journal (tail) ---\n{tail('journal.txt')}"
        try:
            results = json.loads((d / "results.json").read_text())
        except (OSError, ValueError) as e:
            pytest.fail(f"no results from the guest (boot.sh status {rc}, {boot_s:.0f}s): {e}{diag}")
        results["_boot_s"], results["_rc"], results["_diag"] = boot_s, rc, diag
        results["_units_fragment"] = (d / "units" / "nodeagent.service").read_bytes()
        capture = request.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            with capture.global_and_fixture_disabled():  # the timings line, also without -s
                print("\n" + summary(results))
        else:
            print("\n" + summary(results))
        yield results
    finally:
        shutil.rmtree(d, ignore_errors=True)


def summary(r: dict[str, Any]) -> str:
    def f(*keys: str) -> str:
        v: Any = r
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return f"{v:.2f}s" if isinstance(v, (int, float)) else "-"

    return (f"systemd-uml: active {f('start', 'exec_to_active_s')} after exec (systemctl start "
            f"{f('start', 'seconds')}); reload applied {f('reload', 'applied_within_s')} "
            f"(systemctl reload {f('reload', 'seconds')}); systemctl restart {f('restart', 'seconds')} "
            f"(stop {f('restart', 'stop_s')}, start {f('restart', 'exec_to_active_s')}); after SIGSTOP: "
            f"watchdog timeout {f('watchdog', 'timeout_after_s')}, new agent exec {f('watchdog', 'exec_after_s')}, "
            f"active {f('watchdog', 'active_after_s')} (WatchdogSec=5s, RestartSec=2); "
            f"killed container restarted {f('supervised', 'seconds')}; guest {f('_boot_s')} in all")


def check(r: dict[str, Any], step: str) -> dict[str, Any]:
    """The step's record; fails with the driver's error and the journal if it never got there."""
    if "error" in r and step not in r:
        pytest.fail(f"guest driver stopped before {step!r}: {r['error']}{r['_diag']}")
    assert step in r, f"no {step!r} in the results (driver status {r['_rc']}){r['_diag']}"
    return dict(r[step])


def container_ids(pod: dict[str, Any]) -> dict[str, str]:
    return {name: c["containerID"] for name, c in pod["containers"].items()}


def assert_pod_untouched(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    """Same containers, same processes (kernel: same PID and start time, alive), no restarts."""
    assert after["phase"] == "Running", (what, after)
    assert container_ids(after) == container_ids(before), (what, after["containers"])
    assert all(c["state"] == "running" and c["restartCount"] == 0 for c in after["containers"].values()), \
        (what, after["containers"])
    assert all(k["alive"] for k in after["kernel"].values()), (what, after["kernel"])


def test_guest_runs_the_real_unit(guest: dict[str, Any]) -> None:
    r = guest
    assert r.get("systemd_version", "").startswith("systemd 252"), r.get("systemd_version")
    unit = r["unit"]
    assert unit["FragmentPath"] == "/run/systemd/system/nodeagent.service", unit  # not one from /etc
    assert r["fragment"] is not None and r["fragment"].strip() == UNIT_FILE.read_text().strip()
    assert guest["_units_fragment"] == UNIT_FILE.read_bytes()
    dropins = unit["DropInPaths"].split()
    assert "/run/systemd/system/nodeagent.service.d/50-integration.conf" in dropins, dropins
    assert all(p.startswith("/run/systemd/system/nodeagent.service.d/") for p in dropins), dropins
    assert (unit["KillMode"], unit["Delegate"]) == ("process", "yes"), unit
    assert (guest["start"]["show"]["Type"], guest["start"]["show"]["WatchdogUSec"]) == ("notify", "5s")
    assert not r["kubepods_before_start"]
    assert "error" not in r, r["error"] + r["_diag"]
    assert r["_rc"] == 0, r["_diag"]


def test_active_only_after_ready(guest: dict[str, Any]) -> None:
    """`systemctl start` returns once the agent sent READY=1: the API answers at once (one try, no
    retry) and StatusText is the agent's ready line. A Type=simple unit fails all of these: it is
    active as soon as the process is forked, seconds before the agent can listen."""
    start = check(guest, "start")
    s = start["show"]
    assert start["rc"] == 0 and s["ActiveState"] == "active" and s["SubState"] == "running", start
    assert start["healthz"] == [200, "ok"], start["healthz"]
    m = STATUS_TEXT.match(s["StatusText"])
    assert m and m.groups() == ("0", "0"), s["StatusText"]
    # The agent stamps its agent_ready log line before it sends READY=1; systemd enters "active"
    # and writes "Started" only on READY=1. (For Type=simple both come before the agent logs.)
    ready, started = start.get("agent_ready"), start.get("started_line")
    assert ready and started, (start, guest["_diag"])
    assert ready["pid"] == str(start["main_pid"])
    assert ready["agent_timestamp_us"] <= start["active_enter_us"], (ready, start["active_enter_us"])
    assert ready["agent_timestamp_us"] <= started["journal_realtime_us"], (ready, started)
    assert start["exec_to_active_s"] > 0.2, start["exec_to_active_s"]  # imports alone take longer


def test_reload_applies_config_without_restart(guest: dict[str, Any]) -> None:
    """`systemctl reload` (kill -HUP) applies a new systemReserved and evictionHard: the API's
    allocatable and threshold, and the kubepods cgroup's memory.max in the kernel, change; the
    agent and the pod stay the same processes."""
    reload = check(guest, "reload")
    before, after = reload["before"], reload["after"]
    assert reload["rc"] == 0, reload
    assert reload["error"] is None, reload["error"]
    assert after["allocatable"] == before["allocatable"] - (32 + 100) * MiB == reload["expected_allocatable"]
    assert (before["threshold"], after["threshold"]) == (50 * MiB, 150 * MiB), (before, after)
    # enforced pods allocatable = capacity - kubeReserved - systemReserved (no eviction threshold)
    assert before["kubepods"]["max"] - after["kubepods"]["max"] == 32 * MiB, (before, after)
    events = reload["config_reloaded_events"]
    assert len(events) == 1 and set(events[0]["applied"]) == {"systemReserved", "evictionHard"}, events
    assert events[0]["restart_required"] == [], events
    assert after["show"] == before["show"], (before["show"], after["show"])  # same MainPID, no restart
    assert_pod_untouched(guest["pod"]["snapshot"], reload["pod"], "after reload")


def test_restart_keeps_pods_and_readopts_them(guest: dict[str, Any]) -> None:
    """`systemctl restart`: a new agent, the pod's processes untouched (same PIDs and start times)
    and re-adopted before READY=1 (the API shows them at once, restartCount 0), and no
    219/CGROUP (systemd 252 cannot re-attach to a service cgroup with controllers enabled)."""
    restart = check(guest, "restart")
    old, s = restart["old"], restart["show"]
    assert restart["rc"] == 0, restart
    assert (s["ActiveState"], s["SubState"], s["Result"]) == ("active", "running", "success"), s
    assert s["MainPID"] != old["MainPID"] and not restart["old_pid_alive"], (old["MainPID"], s["MainPID"])
    assert s["NRestarts"] == old["NRestarts"], s  # a manual restart, not a failure
    assert restart["healthz"] == [200, "ok"]
    m = STATUS_TEXT.match(s["StatusText"])
    assert m and m.groups() == ("1", "1"), s["StatusText"]  # READY=1 after re-adopting the pod
    assert_pod_untouched(guest["pod"]["snapshot"], restart["pod"], "after systemctl restart")
    bad = [m for m in restart["journal_pid1"] if "219/CGROUP" in m or "Failed to attach" in m]
    assert not bad, bad


def test_watchdog_restarts_a_hung_agent_and_leaves_pods(guest: dict[str, Any]) -> None:
    """SIGSTOP on the agent (no more pings from its loop): systemd's watchdog kills it (SIGABRT)
    after WatchdogSec and Restart=always starts a new one, which re-adopts the untouched pod."""
    wd = check(guest, "watchdog")
    old, first, s = wd["old"], wd["first_new"], wd["show"]
    assert wd["stopped_state"] == "T", wd["stopped_state"]
    assert first["MainPID"] != old["MainPID"] and not wd["old_pid_alive"], (old["MainPID"], first)
    assert int(s["NRestarts"]) == int(old["NRestarts"]) + 1, (old["NRestarts"], s["NRestarts"])
    assert (s["ActiveState"], s["SubState"]) == ("active", "running"), s
    old_pid = old["MainPID"]
    assert "nodeagent.service: Watchdog timeout (limit 5s)!" in wd["journal"], wd["journal"]
    assert f"nodeagent.service: Killing process {old_pid} (nodeagent) with signal SIGABRT." in wd["journal"], \
        wd["journal"]
    # The last ping came at most WatchdogSec/2 before the SIGSTOP (plus the loop's lag): the
    # timeout fires after the stop and within about WatchdogSec of it, then RestartSec=2.
    assert 0 < wd["timeout_after_s"] < 5 + 2.5, wd["timeout_after_s"]
    assert wd["exec_after_s"] > wd["timeout_after_s"] + 1.9, wd  # RestartSec=2 after the kill
    assert wd["healthz"] == [200, "ok"]
    assert_pod_untouched(guest["pod"]["snapshot"], wd["pod"], "after the watchdog restart")
    final = check(guest, "final")
    assert final["watchdog_timeouts"] == 1, final["journal_pid1"]  # none before the SIGSTOP
    # ... and the new agent supervises it: a killed container is seen and restarted.
    sup = check(guest, "supervised")
    main = sup["pod"]["containers"]["main"]
    assert main["restartCount"] == 1 and main["containerID"] != sup["before"]["containerID"], sup
    assert sup["pod"]["containers"]["side"]["containerID"] == container_ids(wd["pod"])["side"], sup


def test_pod_cgroups_outside_the_service_cgroup(guest: dict[str, Any]) -> None:
    """Pods live in the top-level kubepods tree; the service cgroup holds only the agent and the
    agent never enables controllers in it (cgroup.subtree_control stays empty), at every step."""
    pod = check(guest, "pod")
    uid_dirs = {k["cgroup"].rsplit("/", 1)[0] for k in pod["snapshot"]["kernel"].values()}
    assert len(uid_dirs) == 1 and re.fullmatch(r"/kubepods/burstable/pod[0-9a-f-]{36}", uid_dirs.pop()), \
        pod["snapshot"]["kernel"]
    for name, k in pod["snapshot"]["kernel"].items():
        assert k["cgroup"].endswith("/" + name), k
    records = [("pod", pod), ("restart", check(guest, "restart")), ("watchdog", check(guest, "watchdog"))]
    for step, rec in records:
        cg = rec["service_cgroup"]
        main_pid = int(rec["show"]["MainPID"]) if "show" in rec else guest["start"]["main_pid"]
        assert cg["path"] == SERVICE_CGROUP, (step, cg)
        assert cg["subtree_control"] == "", (step, cg)
        assert cg["subdirs"] == [], (step, cg)
        assert cg["procs"] == [main_pid], (step, cg)  # no pod process in the service cgroup
        kernel = (rec.get("snapshot") or rec["pod"])["kernel"]
        assert all(not k["cgroup"].startswith("/system.slice") for k in kernel.values()), (step, kernel)
    assert check(guest, "final")["kubepods_exists"]
