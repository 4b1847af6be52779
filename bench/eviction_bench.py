"""Eviction benchmarks on a real kernel (root): reaction latency, the OOM race, idle CPU. Prints
figures; asserts nothing.

    .venv/bin/python bench/eviction_bench.py latency [--runs 20] [--mechanisms all,memcg,psi,none]
    .venv/bin/python bench/eviction_bench.py race    [--runs 20] [--mechanisms all,none]
    .venv/bin/python bench/eviction_bench.py idle    [--seconds 60] [--mechanisms all,none]
    integration/run-in-uml.sh .venv/bin/python bench/eviction_bench.py latency   # cgroup v2, 1 GiB
    (earlyoom, same hog: bench/earlyoom_compare.py)

Mechanisms are the agent's wake-ups (NODEAGENT_EVICTION_WAKEUPS): "all" arms what the kernel has
(v1: memcg threshold eventfd + PSI; v2: memory.high + memory.events inotify, PSI where present),
"none" leaves the adaptive poll alone (no notifier, no memory.high).

latency: a hog pod adds 64 MiB every 50 ms. From 32 MiB before the line on, it goes in 256 KiB
  chunks, reads the signal itself (/proc/meminfo, or the kubepods files) before each and stamps
  CLOCK_MONOTONIC while it is still above the threshold: the last stamp is the start of the
  chunk that crossed (so figures are at most one chunk, ~0.1 ms, conservative). A pidfd in this
  process stamps the hog's death (its memory is freed by then). Also printed: crossing -> the
  agent's SIGKILL (its container_grace_expired log stamp) and SIGKILL -> death (the kernel
  tearing down the victim's memory, which grows with the victim's size), and where each
  eviction's time went, from the agent's eviction_pass_timing and process_mrelease lines
  (`Agent.breakdown`; the phases are named in bench/README.md, "Where an eviction's time goes").
  Host (v1): allocatableMemory.available < 600Mi on a kubepods limited to 1000Mi (the line is
  ~400 MiB of hog); guest (v2): memory.available, 500Mi below what is available at start.
race: memory.available < 100Mi (guest) / allocatableMemory.available < 100Mi on a 600Mi kubepods
  (host); a hog adds 8 MiB chunks with no pause, to far beyond the node. A run is won when the
  agent evicted the hog and the kernel OOM-killed nothing (kubepods oom_kill, dmesg).
idle: agent utime+stime from /proc/<pid>/stat over --seconds with 3 sleeping pods, thresholds armed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "integration")]
from agent_harness import ensure_loopback_up, poll_until  # noqa: E402
from agent_proc import AgentProc, MachineLoad, pct, proc_times  # noqa: E402
from eviction_helpers import MI, DeathWatch, Hogs, hog_manifest, meminfo, node_memory_available, signal_probe  # noqa: E402

from nodeagent.agent.cgroups.detect import make_driver  # noqa: E402

WAKEUPS_ENV = "NODEAGENT_EVICTION_WAKEUPS"
AGENT_ALLOWANCE = 64 * MI


class Agent:
    """An AgentProc plus what the benchmarks ask of it."""

    def __init__(self, mechanism: str, extra: dict[str, Any], signal: str, threshold: int) -> None:
        self.proc = AgentProc(config_extra=extra, env={WAKEUPS_ENV: mechanism})
        self.signal, self.threshold = signal, threshold
        self.mechanism = mechanism

    def __enter__(self) -> Agent:
        ensure_loopback_up()
        self.proc.start(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        p = self.proc.proc
        if p is not None and p.poll() is None:  # evicted pods stay listed after DELETE: skip the wait
            p.terminate()
            p.wait(30)
        self.proc.stop()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.proc.url + path, data=data, method=method,
                                     headers={**self.proc.headers, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw, status = r.read(), r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def pod(self, name: str) -> dict[str, Any] | None:
        status, body = self.call("GET", f"/api/v1/namespaces/default/pods/{name}")
        return body if status == 200 else None

    def pressure(self) -> bool:
        conditions = self.call("GET", "/api/v1/node")[1]["status"].get("conditions", [])
        return any(c["type"] == "MemoryPressure" and c["status"] == "True" for c in conditions)

    def available(self) -> int:
        if self.signal == "memory.available":
            return node_memory_available()
        limit, usage, inactive = self.kubepods_memory()
        return limit - max(0, usage - inactive)

    def kubepods_file(self, name: str) -> str:
        return os.path.join(os.path.dirname(self.proc.memory_limit_file("kubepods")), name)

    def kubepods_memory(self) -> tuple[int, int, int]:
        if self.proc.version == 2:
            stat = _keyed(self.kubepods_file("memory.stat"))
            limit = Path(self.kubepods_file("memory.max")).read_text().strip()
            current = int(Path(self.kubepods_file("memory.current")).read_text())
            return (1 << 62 if limit == "max" else int(limit), current,
                    stat["inactive_file"])
        stat = _keyed(self.kubepods_file("memory.stat"))
        return (int(Path(self.kubepods_file("memory.limit_in_bytes")).read_text()),
                int(Path(self.kubepods_file("memory.usage_in_bytes")).read_text()), stat["total_inactive_file"])

    def oom_kills(self) -> int:
        name = "memory.events" if self.proc.version == 2 else "memory.oom_control"
        return _keyed(self.kubepods_file(name)).get("oom_kill", 0)

    def kill_sent(self, name: str) -> float | None:
        """Monotonic time the agent logged sending SIGKILL to the pod's container: container_killed
        (a hard eviction's kill, logged right after it) or container_grace_expired (right before)."""
        offset = time.time() - time.monotonic()
        for line in reversed(Path(self.proc.log_path).read_text(errors="replace").splitlines()):
            if ('"container_killed"' in line or '"container_grace_expired"' in line) and f'"default/{name}"' in line:
                stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
                return datetime.fromisoformat(stamp).timestamp() - offset
        return None

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """The agent's JSON log lines of one event, oldest first."""
        out = []
        for line in Path(self.proc.log_path).read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def breakdown(self, name: str, pid: int, crossed: float | None, killed: float | None,
                  died: float) -> dict[str, Any]:
        """Where one eviction's time went, from the agent's log (monotonic stamps): the pass that
        evicted `name` (what woke it, its phases) and the process_mrelease of `pid`."""
        out: dict[str, Any] = {}
        passes = [e for e in self.log_events("eviction_pass_timing") if f"default/{name}" in e.get("victims", [])]
        if passes:
            p = passes[-1]
            out["woken_by"] = p["woken_by"].split(":")[0]
            if crossed is not None:
                out["detect"] = p["started"] - crossed  # crossing -> the pass starts
                if p.get("woken_at") is not None:
                    out["wake"] = p["woken_at"] - crossed
            out.update({k: p[k] / 1000 for k in ("observe_ms", "decide_ms", "usage_ms", "select_ms")})
            if killed is not None:
                out["to_kill"] = killed - p["started"]  # pass start -> SIGKILL
        releases = [e for e in self.log_events("process_mrelease") if e.get("pid") == pid]
        if releases and killed is not None and "started" in releases[-1]:
            r = releases[-1]
            out["mrelease"] = r["outcome"]
            out["mrelease_start"] = r["started"] - killed
            out["mrelease_ms"] = r["elapsed_ms"] / 1000
            out["mrelease_to_death"] = died - (r["started"] + r["elapsed_ms"] / 1000)
        return out

    def reaction_metric(self) -> tuple[float, int]:
        """(sum, count) of nodeagent_eviction_reaction_seconds: the agent's own view (stats -> kills done)."""
        status, text = self.call("GET", "/metrics")
        total = count = 0.0
        for line in str(text).splitlines():
            if line.startswith("nodeagent_eviction_reaction_seconds_sum"):
                total += float(line.split()[-1])
            elif line.startswith("nodeagent_eviction_reaction_seconds_count"):
                count += float(line.split()[-1])
        return total, int(count)


def _keyed(path: str) -> dict[str, int]:
    out = {}
    for line in Path(path).read_text().splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v)
    return out


def killed_in_dmesg() -> list[str]:
    """Kernel log lines of OOM kills ("Killed process"), [] if the log is unreadable."""
    try:
        text = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in text.splitlines() if "Killed process" in line or "oom-kill:" in line]


def setup(version: int, kind: str) -> tuple[str, int, dict[str, Any]]:
    """(signal, threshold bytes, agent config) for a benchmark kind on this kernel."""
    # debug: process_mrelease's line (its only other debug lines are one at start and v1 re-arms)
    base: dict[str, Any] = {"evictionPressureTransitionPeriod": "0s", "housekeepingInterval": "10s",
                            "logging": {"level": "debug", "format": "json"}}
    if version == 1:
        kubepods, threshold = (1000 * MI, 600 * MI) if kind == "latency" else (600 * MI, 100 * MI)
        base["systemReserved"] = {"memory": str(meminfo()["MemTotal"] - kubepods)}
        signal = "allocatableMemory.available"
    else:
        signal = "memory.available"
        threshold = 100 * MI if kind == "race" else (node_memory_available() - AGENT_ALLOWANCE - 500 * MI) // MI * MI
    base["evictionHard"] = {signal: f"{threshold // MI}Mi"}
    return signal, threshold, base


def run_hog(agent: Agent, hogs: Hogs, name: str, *, step: int, interval: float, beyond: int,
            stamp: bool = True) -> dict[str, Any]:
    """One hog pod from creation to death; what happened to it."""
    status, body = agent.call("POST", "/api/v1/pods", hog_manifest(name, hogs.ctl, grace=0))
    assert status == 201, (status, body)
    pid = hogs.ready(name)
    watch = DeathWatch(pid)
    time.sleep(0.3)  # let the agent settle its lines after the new pod
    oom0, dmesg0 = agent.oom_kills(), killed_in_dmesg()
    h = agent.available() - agent.threshold
    probe = None
    if stamp:  # the hog reads the signal itself near the line (page tables etc. count too)
        probe = signal_probe(None, agent.signal, agent.threshold, version=agent.proc.version,
                             kubepods_dir=os.path.dirname(agent.kubepods_file("x")))
    hogs.go(name, h + beyond, step=step, interval=interval, cross=h if stamp else None, probe=probe)
    died = watch.wait(120)
    crossed = hogs.stamp(name, "cross")
    pod = poll_until(lambda: (p := agent.pod(name)) and p["status"]["phase"] in ("Failed", "Succeeded") and p, 30,
                     f"{name} to finish")
    killed = agent.kill_sent(name)  # wall-clock log stamp -> monotonic
    seen = set(dmesg0)
    new_kills = [line for line in killed_in_dmesg() if line not in seen]
    if agent.proc.version == 1:  # the host's log has other people's OOM kills: keep ours
        new_kills = [line for line in new_kills if f"Killed process {pid} " in line or agent.proc.root in line]
    oom = agent.oom_kills() - oom0
    evicted = pod["status"].get("reason") == "Evicted"
    won = evicted and oom == 0 and not new_kills
    poll_until(lambda: not agent.pressure(), 60, "MemoryPressure to clear")
    parts = agent.breakdown(name, pid, crossed, killed, died)
    return {"parts": parts, "latency": died - crossed if crossed else None, "evicted": evicted, "oom_kills": oom,
            "decide": killed - crossed if crossed and killed else None, "teardown": died - killed if killed else None,
            "kernel_kills": len(new_kills), "won": won, "headroom": h}


def series(version: int, kind: str, mechanism: str, runs: int, step: int, interval: float, beyond: int,
           ) -> list[dict[str, Any]]:
    signal, threshold, extra = setup(version, kind)
    out = []
    with tempfile.TemporaryDirectory(prefix="evict-bench-") as tmp, Agent(mechanism, extra, signal, threshold) as agent:
        hogs = Hogs(Path(tmp))
        load = MachineLoad()
        for i in range(runs):
            r = run_hog(agent, hogs, f"{kind}-{i}", step=step, interval=interval, beyond=beyond,
                        stamp=kind == "latency")
            out.append(r)
            lat = f"{r['latency'] * 1000:7.1f} ms" if r["latency"] is not None else "   (no crossing)"
            if r["decide"] is not None:
                lat += f" (to SIGKILL {r['decide'] * 1000:6.1f} ms, then death {r['teardown'] * 1000:5.1f} ms)"
            print(f"  {kind} {mechanism:>13} run {i + 1:2d}: {lat}  hog {r['headroom'] // MI} MiB "
                  f"evicted={r['evicted']} "
                  f"kubepods_oom_kills={r['oom_kills']} kernel_kills={r['kernel_kills']}", flush=True)
            if r["parts"]:
                print(f"      {parts_text(r['parts'])}", flush=True)
        print(f"  machine during the series: {load.text()}", flush=True)
        if kind == "latency":
            print(breakdown_summary(out), flush=True)
        total, count = agent.reaction_metric()
        if count:
            print(f"  agent's own nodeagent_eviction_reaction_seconds (stats -> kills done): "
                  f"mean {total / count * 1000:.1f} ms over {count}", flush=True)
    return out


PHASES = ("wake", "detect", "observe_ms", "decide_ms", "usage_ms", "select_ms", "to_kill", "mrelease_start",
          "mrelease_ms", "mrelease_to_death")


def parts_text(parts: dict[str, Any]) -> str:
    """One run's breakdown: the phases in ms, what woke the pass, what mrelease did."""
    shown = [f"{k.removesuffix('_ms')} {parts[k] * 1000:.1f}" for k in PHASES if k in parts]
    return (f"woken by {parts.get('woken_by', '?')}: " + ", ".join(shown)
            + (f" (mrelease {parts['mrelease']})" if "mrelease" in parts else ""))


def breakdown_summary(rows: list[dict[str, Any]]) -> str:
    """p50/p99 of each phase over a series, and how the evicting passes were woken."""
    parts = [r["parts"] for r in rows if r.get("parts") and r["latency"] is not None]
    if not parts:
        return "  (no breakdown: the agent logged no eviction_pass_timing)"
    woken: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for p in parts:
        woken[p.get("woken_by", "?")] = woken.get(p.get("woken_by", "?"), 0) + 1
        if "mrelease" in p:
            outcomes[p["mrelease"]] = outcomes.get(p["mrelease"], 0) + 1
    phases = []
    for k in PHASES:
        v = [p[k] * 1000 for p in parts if k in p]
        if v:
            phases.append(f"{k.removesuffix('_ms')} {pct(v, 0.5):.1f}/{pct(v, 0.99):.1f}")
    return (f"  breakdown p50/p99 ms: {', '.join(phases)}; woken by {woken}; mrelease {outcomes}")


def summary(kind: str, mechanism: str, rows: list[dict[str, Any]]) -> str:
    lat = [r["latency"] * 1000 for r in rows if r["latency"] is not None and r["evicted"]]
    won = sum(1 for r in rows if r["won"])
    figures = (f"p50 {pct(lat, 0.5):6.1f} ms  p99 {pct(lat, 0.99):6.1f} ms  min {min(lat):6.1f}  max {max(lat):6.1f}"
               if lat else "")
    decide = [r["decide"] * 1000 for r in rows if r["decide"] is not None and r["latency"] is not None]
    if decide:
        figures += f"  | crossing->SIGKILL p50 {pct(decide, 0.5):5.1f} p99 {pct(decide, 0.99):5.1f} ms"
    return f"{kind:8} {mechanism:14} {figures}  won {won}/{len(rows)} (evicted before any kernel OOM kill)"


def idle(version: int, mechanism: str, seconds: float) -> str:
    signal, threshold, extra = setup(version, "latency")
    with Agent(mechanism, extra, signal, threshold) as agent:
        for i in range(3):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"sleep-{i}", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "command": ["sleep", "100000"]}]}}
            assert agent.call("POST", "/api/v1/pods", pod)[0] == 201
        time.sleep(5)
        pid = agent.proc.pid
        u0, s0 = proc_times(pid)
        t0 = time.monotonic()
        time.sleep(seconds)
        u1, s1 = proc_times(pid)
        wall = time.monotonic() - t0
        cpu = (u1 - u0) + (s1 - s0)
        armed = [json.loads(line) for line in Path(agent.proc.log_path).read_text().splitlines()
                 if "eviction_wakeups_armed" in line]
        what = armed[-1]["armed"] if armed else "?"
    return (f"idle     {mechanism:14} {cpu:.2f} CPU-s in {wall:.0f} s = {100 * cpu / wall:.2f}% of one core"
            f"  (armed: {what})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["latency", "race", "idle"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--mechanisms", default=None,
                    help="comma list (default: all,none; latency on v1: all,memcg,psi,none)")
    args = ap.parse_args()
    version = make_driver("auto", "/nodeagent-bench-probe").version
    kernel = f"{platform.release()} cgroup v{version}, {meminfo()['MemTotal'] // MI} MiB, {os.cpu_count()} CPU"
    default = "all,memcg,psi,none" if version == 1 and args.what == "latency" else "all,none"
    mechanisms = (args.mechanisms or default).split(",")
    print(f"# eviction_bench {args.what} on {kernel}", flush=True)
    lines = []
    for m in mechanisms:
        if args.what == "idle":
            lines.append(idle(version, m, args.seconds))
            print(lines[-1], flush=True)
            continue
        if args.what == "latency":
            rows = series(version, "latency", m, args.runs, 64 * MI, 0.05, 192 * MI if version == 2 else 512 * MI)
        else:
            rows = series(version, "race", m, args.runs, 8 * MI, 0.0, 4 << 30)
        lines.append(summary(args.what, m, rows))
        print(lines[-1], flush=True)
    print(f"# summary ({kernel})")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
