"""systemd/nodeagent.service: `systemd-analyze verify` passes, and the settings the agent relies on
(and the sandboxing it must not have, see the unit's comments) stay as they are."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "nodeagent.service"
INSTALLED_BINARY = "/usr/local/bin/nodeagent"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (no systemd on this host)")


def settings(text: str) -> dict[str, list[str]]:
    """Key -> values, across sections (the unit uses each key in one section only)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def verify(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    """Run `systemd-analyze verify` on a copy whose ExecStart names an executable that exists
    here (verify checks that; the real path appears with `make install-systemd`). Returns the
    exit status and the output lines about this unit (verify only warns about unknown keys or
    bad values, with status 0, so the lines matter as much as the status)."""
    binary = Path(sys.executable).with_name("nodeagent")
    exe = str(binary if binary.exists() else sys.executable)
    unit = tmp_path / "nodeagent.service"
    unit.write_text(text.replace(INSTALLED_BINARY, exe))
    proc = subprocess.run([str(ANALYZE), "verify", str(unit)], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "nodeagent" in ln]
    return proc.returncode, lines


@needs_analyze
def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert INSTALLED_BINARY in text
    rc, lines = verify(tmp_path, text)
    assert rc == 0 and lines == [], lines


@needs_analyze
def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a bad value and an unknown key are reported."""
    text = UNIT.read_text().replace("WatchdogSec=30s", "WatchdogSec=thirty").replace(
        "KillMode=process", "KillMode=process\nKilMode=process")
    rc, lines = verify(tmp_path, text)
    assert any("WatchdogSec" in ln or "thirty" in ln for ln in lines), lines
    assert any("KilMode" in ln for ln in lines), lines


def test_unit_settings_the_agent_relies_on() -> None:
    s = settings(UNIT.read_text())
    expected = {
        "Type": "notify", "NotifyAccess": "main", "WatchdogSec": "30s", "Restart": "always", "RestartSec": "2",
        "KillMode": "process", "Delegate": "yes", "OOMScoreAdjust": "-999", "StartLimitIntervalSec": "0",
        "ExecReload": "/bin/kill -HUP $MAINPID",
    }
    for key, value in expected.items():
        assert s.get(key) == [value], key
    assert s["ExecStart"] == [f"{INSTALLED_BINARY} run --config /etc/nodeagent/config.yaml"]
    # inherited by every pod (same mount namespace, seccomp, capabilities) or fatal to cgroup writes
    for forbidden in ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "NoNewPrivileges",
                      "ProtectControlGroups", "ProtectKernelTunables", "SystemCallFilter", "CapabilityBoundingSet",
                      "RestrictNamespaces", "MemoryDenyWriteExecute", "UMask", "ExecStartPre"):
        assert forbidden not in s, forbidden
