"""`kubectl exec` into an image container goes through the OCI runtime's exec (OciExec): its argv,
and the kill of the exec'd process its pid file names, only while it is in the container's cgroup."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodeagent.agent.runtime.oci.runtime import BundleDirs, OciExec, OciRuntime


def handle(tmp_path: Path, cgroup: str = "/kubepods/podX/main") -> OciExec:
    return OciRuntime("runc", "/usr/sbin/runc", "/state/runc").exec_handle("uid-main", BundleDirs(str(tmp_path)),
                                                                           cgroup)


def test_argv(tmp_path: Path) -> None:
    h = handle(tmp_path)
    pid_file = h.pid_file()
    assert pid_file.startswith(f"{tmp_path}/exec-") and pid_file.endswith(".pid") and pid_file != h.pid_file()
    assert h.argv(["sh", "-c", "id"], tty=False, pid_file=pid_file) == [
        "/usr/sbin/runc", "--root", "/state/runc", "exec", "--pid-file", pid_file, "uid-main", "sh", "-c", "id"]
    assert h.argv(["sh"], tty=True, pid_file=pid_file)[3:6] == ["exec", "--tty", "--pid-file"]
    with pytest.raises(ValueError, match="command: Required value"):
        h.argv([], tty=False, pid_file=pid_file)


def test_kill_only_a_process_of_the_container(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "exec.pid"
        pid_file.write_text(str(proc.pid))
        handle(tmp_path, "/no-such-cgroup-of-ours").kill(str(pid_file))  # not in the container's cgroup: kept
        assert proc.poll() is None
        own = Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()[-1].split(":", 2)[2]
        handle(tmp_path, own).kill(str(pid_file))
        assert proc.wait(5) == -9
        handle(tmp_path, own).kill(str(pid_file))  # gone: nothing happens
        handle(tmp_path, own).kill(str(tmp_path / "missing.pid"))
    finally:
        proc.kill()
        proc.wait()
