"""Finding a container's process again when no record names it (the agent died between the spawn
and the pid's checkpoint), so it is adopted and never started a second time.

The shim (spawn.py) is, at every instant of its life, either still the shim, with the cgroup.procs
files it will join in its argv (`sh -c <script> nodeagent-shim <procs files...>`), or already in the
container's cgroup (it joins before it execs). So the processes are looked for in that order:
first every shim in /proc (one scan for a whole restore, before anything new is spawned), then the
cgroup's own processes. The container's process is the session leader (the shim calls setsid),
so leftovers of an earlier run (its children, same session) are never taken for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from nodeagent.agent.node.procfs import process_start_time, session_id

SHIM_ARGV0 = "nodeagent-shim"  # $0 of the shim script (spawn.shim_argv)


def shim_argv_procs(argv: list[str]) -> list[str]:
    """The cgroup.procs files a shim's argv names ([] if it is not a shim): every absolute
    cgroup.procs path right after $0, in order."""
    if len(argv) < 4 or argv[1] != "-c" or argv[3] != SHIM_ARGV0:
        return []
    out = []
    for a in argv[4:]:
        if not (a.startswith("/") and a.endswith("/cgroup.procs")):
            break
        out.append(a)
    return out


def scan_shims(proc: str = "/proc") -> dict[str, int]:
    """procs file -> pid of every shim that has not exec'd yet (blocking: reads /proc)."""
    found: dict[str, int] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        if SHIM_ARGV0.encode() not in raw:
            continue
        pid = int(entry)
        for path in shim_argv_procs([a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]):
            # a child the shell forked still shows the shim's argv until it execs; the shim itself
            # is the session leader (it was spawned with setsid), its children are not
            if path not in found or _leads_session(proc, pid):
                found[path] = pid
    return found


def _leads_session(proc: str, pid: int) -> bool:
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    fields = data[data.rindex(b")") + 2:].split()
    return len(fields) > 3 and fields[3] == str(pid).encode()


def find_container_process(procs_files: Iterable[str], cgroup_pids: Iterable[int],
                           shims: Mapping[str, int]) -> tuple[int, int] | None:
    """(pid, start time) of the container's process: a shim about to join one of its procs
    files, else the session leader among the cgroup's pids; None if neither exists."""
    for f in procs_files:
        pid = shims.get(f)
        if pid is not None:
            start = process_start_time(pid)
            if start is not None:
                return pid, start
    for pid in sorted(cgroup_pids):
        if session_id(pid) == pid:
            start = process_start_time(pid)
            if start is not None:
                return pid, start
    return None
