"""The eviction_bench latency hog against earlyoom 1.7 (Debian's package), side by side with the agent.

    .venv/bin/python bench/earlyoom_compare.py [--runs 20] [--with-agent all,none]
    integration/run-in-uml.sh .venv/bin/python bench/earlyoom_compare.py --with-agent all,none

The hog (eviction_helpers.HOG_SCRIPT, comm "evict-hog", oom_score_adj 1000) adds 64 MiB every
50 ms and stamps CLOCK_MONOTONIC at the start of the 256 KiB chunk in which MemAvailable went
below earlyoom's line; a pidfd stamps its death. earlyoom runs in the foreground, by hand, only
while a hog is alive (never as a service), with -M LINE,LINE (SIGKILL at once, as the agent's
hard eviction), LINE = MemAvailable now - --hog MiB, --prefer '^evict-hog$' and --avoid
everything else, so on a shared host the hog (score + 300 against everyone else's - 300) is the
only process it can pick. Its "sending SIGKILL" line is stamped on arrival (crossing -> kill).

The binary: $EARLYOOM, earlyoom on PATH, or <checkout>/.uml-work/earlyoom/usr/bin/earlyoom,
fetched there (host only) with `apt-get download earlyoom` + `dpkg -x`: never installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "integration")]
from agent_proc import pct  # noqa: E402
from eviction_helpers import HOG_SCRIPT, MI, PYTHON, DeathWatch, Hogs, meminfo, signal_probe  # noqa: E402

from nodeagent.agent.cgroups.detect import make_driver  # noqa: E402

LOCAL = HERE.parent / ".uml-work" / "earlyoom"


def earlyoom_binary() -> str:
    for candidate in (os.environ.get("EARLYOOM"), shutil.which("earlyoom"), str(LOCAL / "usr/bin/earlyoom")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    LOCAL.mkdir(parents=True, exist_ok=True)  # .uml-work is self-gitignored
    subprocess.run("apt-get download earlyoom && dpkg -x earlyoom_*.deb . && rm -f earlyoom_*.deb",
                   shell=True, cwd=LOCAL, check=True)
    return str(LOCAL / "usr/bin/earlyoom")


def version_text(binary: str) -> str:
    r = subprocess.run([binary, "-v"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[0] if (r.stdout + r.stderr).strip() else "earlyoom ?"


class Earlyoom:
    """earlyoom in the foreground; stamps the monotonic time of its first 'sending SIGKILL' line."""

    def __init__(self, binary: str, line_kib: int) -> None:
        self.proc = subprocess.Popen(
            [binary, "-M", f"{line_kib},{line_kib}", "-r", "0", "--prefer", "^evict-hog$",
             "--avoid", "^([^e]|e[^v]|ev[^i])"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.kill_sent: float | None = None
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.kill_sent is None and "sending SIGKILL" in line:
                self.kill_sent = time.monotonic()
            self.output.append(line.rstrip())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._reader.join(5)


def one_run(binary: str, hogs: Hogs, name: str, hog_bytes: int, beyond: int) -> dict[str, float | None]:
    hog = subprocess.Popen([PYTHON, "-I", "-S", "-c", HOG_SCRIPT, str(hogs.ctl), name, "1000"],
                           stdin=subprocess.DEVNULL)
    try:
        pid = hogs.ready(name)
        assert pid == hog.pid
        watch = DeathWatch(pid)
        available = meminfo()["MemAvailable"]
        line = available - hog_bytes
        eo = Earlyoom(binary, line // 1024)
        try:
            time.sleep(0.5)  # let it start and print its banner
            probe = signal_probe(None, "MemAvailable", line)
            hogs.go(name, hog_bytes + beyond, step=64 * MI, interval=0.05, cross=hog_bytes, probe=probe)
            died = watch.wait(60)
        finally:
            eo.stop()
        crossed = hogs.stamp(name, "cross")
        killed_by_earlyoom = hog.wait(10) == -9 and eo.kill_sent is not None
        return {"latency": died - crossed if crossed else None, "decide": (eo.kill_sent - crossed)
                if crossed and eo.kill_sent else None, "by_earlyoom": killed_by_earlyoom}
    finally:
        if hog.poll() is None:
            hog.kill()
            hog.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--hog", type=int, default=0, help="MiB the hog holds at earlyoom's line (default: "
                    "as eviction_bench latency: 400 on the host, 500 in a guest of <= 2 GiB)")
    ap.add_argument("--beyond", type=int, default=0, help="MiB the hog goes on past the line (default: "
                    "1024 on the host, 256 in a small guest)")
    ap.add_argument("--with-agent", default="", help="also run eviction_bench latency with these mechanisms")
    args = ap.parse_args()
    version = make_driver("auto", "/nodeagent-bench-probe").version
    total = meminfo()["MemTotal"]
    hog_mib = args.hog or (500 if total <= 2 << 30 else 400)
    # far past the line on the host, where other people's memory moves MemAvailable too
    beyond = (args.beyond or (256 if total <= 2 << 30 else 1024)) * MI
    binary = earlyoom_binary()
    kernel = f"{platform.release()} cgroup v{version}, {total // MI} MiB, {os.cpu_count()} CPU"
    print(f"# earlyoom_compare on {kernel}: {version_text(binary)}"
          f", hog +64 MiB / 50 ms, line at {hog_mib} MiB of hog", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="earlyoom-bench-") as tmp:
        hogs = Hogs(Path(tmp))
        for i in range(args.runs):
            r = one_run(binary, hogs, f"eo-{i}", hog_mib * MI, beyond)
            rows.append(r)
            lat = f"{r['latency'] * 1000:7.1f} ms" if r["latency"] is not None else "   (no crossing)"
            if r["decide"] is not None:
                lat += f" (to SIGKILL {r['decide'] * 1000:6.1f} ms)"
            print(f"  earlyoom run {i + 1:2d}: {lat}  killed by earlyoom={r['by_earlyoom']}", flush=True)
            time.sleep(0.5)
    lat = [r["latency"] * 1000 for r in rows if r["latency"] is not None and r["by_earlyoom"]]
    dec = [r["decide"] * 1000 for r in rows if r["decide"] is not None and r["by_earlyoom"]]
    lines = [f"latency  earlyoom-1.7    p50 {pct(lat, 0.5):6.1f} ms  p99 {pct(lat, 0.99):6.1f} ms  min {min(lat):6.1f}"
             f"  max {max(lat):6.1f}  | crossing->SIGKILL p50 {pct(dec, 0.5):5.1f} p99 {pct(dec, 0.99):5.1f} ms"
             f"  ({len(lat)}/{len(rows)} killed by earlyoom)" if lat else "earlyoom killed nothing"]
    if args.with_agent:
        import eviction_bench as eb

        for m in args.with_agent.split(","):
            agent_rows = eb.series(version, "latency", m, args.runs, 64 * MI, 0.05,
                                   192 * MI if version == 2 else 512 * MI)
            lines.append(eb.summary("latency", f"agent-{m}", agent_rows))
    print(f"# side by side ({kernel})")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
