"""How fast the runtime starts container processes inside their cgroups (host cgroup v1, as root).

Spawns N short processes (/bin/true) through nodeagent.agent.runtime.spawn into a fresh memory + cpu
cgroup pair with an oom_score_adj, and prints:
  - the time spent in spawn() (what the agent's event loop pays), total and percentiles,
  - the time until every process has run and exited (the shim's sh + exec included),
  - the same with runAsUser (one more exec through setpriv),
  - a baseline: subprocess.Popen with a preexec_fn doing the same cgroup joins (fork path).
A ballast (--ballast-mb) makes the agent's own memory larger, which is what makes fork costly.

    sudo .venv/bin/python bench/spawn_bench.py [-n 100] [--ballast-mb 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

from nodeagent.agent.runtime.spawn import LaunchSpec, spawn

MEM_ROOT = "/sys/fs/cgroup/memory"
CPU_ROOT = "/sys/fs/cgroup/cpu"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(label: str, n: int, start: Callable[[int], int]) -> None:
    per: list[float] = []
    pids: list[int] = []
    t0 = time.perf_counter()
    for i in range(n):
        a = time.perf_counter()
        pids.append(start(i))
        per.append((time.perf_counter() - a) * 1e3)
    t1 = time.perf_counter()
    bad = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        bad += status != 0
    t2 = time.perf_counter()
    print(
        f"{label:<34} spawn total {(t1 - t0) * 1e3:7.1f} ms  per-spawn p50 {statistics.median(per):5.2f} ms"
        f" p99 {pct(per, 0.99):5.2f} ms  | all exited {(t2 - t0) * 1e3:7.1f} ms"
        + (f"  FAILED {bad}" if bad else "")
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--ballast-mb", type=int, default=0, help="grow the parent's RSS first")
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: it writes cgroup.procs")
    ballast = bytearray(b"x" * (opts.ballast_mb << 20)) if opts.ballast_mb else b""
    name = f"nodeagent-rt-bench-{uuid.uuid4().hex[:8]}"
    dirs = [f"{MEM_ROOT}/{name}", f"{CPU_ROOT}/{name}"]
    for d in dirs:
        os.mkdir(d)
    files = [f"{d}/cgroup.procs" for d in dirs]
    tmp = tempfile.mkdtemp(prefix="nodeagent-spawn-bench-")
    log = os.path.join(tmp, "0.log")
    try:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"N={opts.n} spawns per round, 2 cgroups (memory, cpu), oom_score_adj 500, parent max RSS {rss:.0f} MB")
        plain = LaunchSpec(("/bin/true",))
        as_user = LaunchSpec(("/bin/true",), run_as_user=65534)

        def popen_preexec(_: int) -> int:
            def join() -> None:
                for f in files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))
                with open("/proc/self/oom_score_adj", "w") as fh:
                    fh.write("500")

            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
            try:
                p = subprocess.Popen(
                    ["/bin/true"], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                    start_new_session=True, preexec_fn=join, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                )
            finally:
                os.close(fd)
            pid = p.pid
            p.returncode = 0  # we reap it ourselves; keep Popen.__del__ from doing it
            return pid

        for r in range(opts.rounds):
            print(f"-- round {r + 1}")
            run("spawn() posix_spawn + shim", opts.n, lambda _: spawn(plain, log, files, 500).pid)
            run("spawn() runAsUser (setpriv)", opts.n, lambda _: spawn(as_user, log, files, 500).pid)
            run("baseline Popen + preexec_fn (fork)", opts.n, popen_preexec)
    finally:
        for d in dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.02)
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
        del ballast


if __name__ == "__main__":
    main()
