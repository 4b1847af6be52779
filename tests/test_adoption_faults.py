"""Finding an unrecorded container process (runtime/adoption.py) on real processes, and the
fault-point switch (daemonkit/faults.py) in a real child that it kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.agent.runtime.adoption import find_container_process, scan_shims, shim_argv_procs
from nodeagent.agent.runtime.spawn import LaunchSpec, shim_argv
from nodeagent.daemonkit import faults


def test_shim_argv_names_its_procs_files() -> None:
    argv = shim_argv(LaunchSpec(("sleep", "1")), ["/sys/fs/cgroup/a/cgroup.procs", "/sys/fs/cgroup/b/cgroup.procs"], 5)
    assert shim_argv_procs(argv) == ["/sys/fs/cgroup/a/cgroup.procs", "/sys/fs/cgroup/b/cgroup.procs"]
    assert shim_argv_procs(["sh", "-c", "x", "other", "/a/cgroup.procs"]) == []
    assert shim_argv_procs(["sleep", "1"]) == []


def test_a_shim_that_has_not_joined_yet_is_found_and_leftovers_are_not() -> None:
    procs = f"/nonexistent-{os.getpid()}/cgroup.procs"
    # a process that looks exactly like a shim before its first line ran (it never joins: it sleeps)
    shim = subprocess.Popen(["sh", "-c", "sleep 30", "nodeagent-shim", procs, "", "/"], start_new_session=True)
    child = subprocess.Popen(["sleep", "30"])  # not a session leader: a leftover of an earlier run
    try:
        deadline = time.monotonic() + 5
        while procs not in (shims := scan_shims()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shims.get(procs) == shim.pid
        found = find_container_process([procs], [], shims)
        assert found is not None and found[0] == shim.pid
        assert find_container_process(["/other/cgroup.procs"], [child.pid], shims) is None
        assert find_container_process(["/other/cgroup.procs"], [child.pid, shim.pid], {})[0] == shim.pid  # type: ignore[index]
    finally:
        for p in (shim, child):
            p.kill()
            p.wait()


def test_a_forked_child_showing_the_shims_argv_is_not_taken_for_the_shim(tmp_path: Path) -> None:
    """Between fork and exec a shell's child shows the shim's argv too; the shim leads its session."""
    argv = b"\0".join([b"sh", b"-c", b"script", b"nodeagent-shim", b"/g/cgroup.procs", b"", b"/"]) + b"\0"
    for pid, session in ((200, 100), (100, 100), (300, 100)):  # listing order must not matter
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(argv)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (sh) S 1 {session} {session} 0 -1\n")
    assert scan_shims(str(tmp_path)) == {"/g/cgroup.procs": 100}


def test_fault_spec_parsing() -> None:
    assert faults._parse("a, b:3") == {"a": 1, "b": 3}
    with pytest.raises(ValueError, match="b:x"):
        faults._parse("b:x")
    with pytest.raises(ValueError, match="n >= 1"):
        faults._parse("b:0")


def test_an_armed_point_kills_the_process_on_its_nth_hit() -> None:
    code = ("from nodeagent.daemonkit import faults\n"
            "for i in range(5):\n"
            "    print(i, flush=True)\n"
            "    faults.hit('here')\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, faults.ENV: "here:3"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL and out.stdout.split() == ["0", "1", "2"]
    unarmed = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in os.environ.items()
                                                               if k != faults.ENV},
                             capture_output=True, text=True, timeout=60)
    assert unarmed.returncode == 0 and unarmed.stdout.split() == ["0", "1", "2", "3", "4"]
