"""The scheduler's config: defaults, strict keys with errors naming the key, the example file
documents every key, the CLI, and the systemd unit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.config.settings import ConfigError
from nodeagent.cli.main import main
from nodeagent.cluster.config import SchedulerConfig, load_scheduler_config, parse_scheduler_config

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "config" / "scheduler.yaml"
UNIT = REPO / "systemd" / "nodeagent-scheduler.service"


def errors(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_scheduler_config(data, "f")
    return e.value.errors


def test_defaults() -> None:
    c = parse_scheduler_config({}, "f")
    assert (c.address, c.port, c.state_dir, c.scoring) == ("127.0.0.1", 10251, "/var/lib/nodeagent-scheduler",
                                                           "LeastAllocated")
    assert (c.node_monitor_grace_period, c.pod_eviction_timeout, c.nodes) == (40.0, 300.0, ())
    assert c.db_path == "/var/lib/nodeagent-scheduler/scheduler.db"
    assert c.to_dict()["podEvictionTimeout"] == "5m0s"


def test_example_loads_and_names_every_key() -> None:
    c = load_scheduler_config(EXAMPLE)
    assert c.nodes[0].name == "node-a" and c.nodes[0].url == "http://127.0.0.1:10250"
    text = EXAMPLE.read_text()
    for name, field in SchedulerConfig.model_fields.items():
        key = field.alias or name
        assert f"\n{key}:" in text, f"config/scheduler.yaml lacks {key}"


@pytest.mark.parametrize(("data", "expected"), [
    ({"nodez": []}, "nodez: unknown field (did you mean nodes?)"),
    ({"port": 70000}, "port: Input should be less than or equal to 65535"),
    ({"address": "localhost"}, 'address: must be an IP address, got "localhost"'),
    ({"nodes": [{"name": "a", "url": "http://h:1"}, {"name": "a", "url": "http://h:2"}]},
     'nodes[1].name: Duplicate value: "a"'),
    ({"nodes": [{"name": "a", "url": "h:1"}]}, 'nodes[0].url: must be an http:// or https:// URL with a host, got "h:1"'),
    ({"nodes": [{"name": "a"}]}, "nodes[0].url: Field required"),
    ({"nodes": [{"name": "a", "url": "http://h", "port": 1}]}, "nodes[0].port: unknown field"),
    ({"nodeMonitorGracePeriod": "0s"}, "nodeMonitorGracePeriod: must be positive, got 0s"),
    ({"podEvictionTimeout": 300}, 'podEvictionTimeout: expected a duration string like "10s" or "1m30s", got 300'),
    ({"scoring": "Spread"}, "scoring: Input should be 'LeastAllocated' or 'MostAllocated'"),
    ({"storeSync": "off"}, "storeSync: Input should be 'normal' or 'full'"),
    ({"agentTokenFile": "token"}, 'agentTokenFile: must be an absolute path, got "token"'),
    ({"authentication": "open"}, 'authentication: must be "none" or a mapping with tokenFile and/or clientCAFile'),
    ({"podInitialBackoff": "5s", "podMaxBackoff": "1s"}, "podMaxBackoff: must be at least podInitialBackoff"),
    ({"tlsCertFile": "/c"}, "tlsCertFile: tlsCertFile and tlsPrivateKeyFile must be set together"),
])
def test_errors_name_the_key(data: dict[str, Any], expected: str) -> None:
    assert errors(data) == [expected]


def test_yaml_problems(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("port: 1\nport: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'port'"):
        load_scheduler_config(f)
    f.write_text("- a\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_scheduler_config(f)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_scheduler_config(tmp_path / "missing.yaml")


def test_cli_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scheduler", "check-config", "--config", str(EXAMPLE)]) == 0
    assert '"kind": "SchedulerConfiguration"' in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("address: 10.1.2.3\n")
    assert main(["scheduler", "check-config", "--config", str(bad)]) == 1
    assert "address: address 10.1.2.3 is not a loopback address" in capsys.readouterr().err
    bad.write_text("scoring: x\n")
    assert main(["scheduler", "run", "--config", str(bad)]) == 1
    assert f"{bad}: scoring: Input should be" in capsys.readouterr().err


def test_systemd_unit() -> None:
    settings: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            k, _, v = line.partition("=")
            settings[k] = v
    assert settings["ExecStart"] == "/usr/local/bin/nodeagent scheduler run --config /etc/nodeagent/scheduler.yaml"
    assert settings["Type"] == "notify" and settings["Restart"] == "always"
    assert settings["StateDirectory"] == "nodeagent-scheduler"
    assert load_scheduler_config(EXAMPLE).state_dir == "/var/lib/" + settings["StateDirectory"]


def test_module_runs_as_a_subcommand() -> None:
    out = subprocess.run([sys.executable, "-m", "nodeagent", "scheduler", "--help"], capture_output=True,
                         text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and "check-config" in out.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("nodeagent")
    unit = tmp_path / "nodeagent-scheduler.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/nodeagent", str(exe)))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "nodeagent-scheduler" in ln]
    assert proc.returncode == 0 and lines == [], lines
    broken = tmp_path / "broken" / "nodeagent-scheduler.service"
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace("ProtectHome=yes", "ProtectHome=yes\nProtectHom=yes"))
    proc = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=60)
    assert "ProtectHom" in proc.stdout + proc.stderr  # the check can fail
