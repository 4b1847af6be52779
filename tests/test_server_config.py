"""`nodeagent server` config: strict keys, loopback-only without security, the CLI's check-config."""

from __future__ import annotations

import json

import pytest

from nodeagent.cli.main import main
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.daemonkit.configfile import ConfigError


def test_defaults() -> None:
    c = parse_server_config({}, "t")
    assert (c.address, c.port, c.storage.backend, c.compaction_interval) == ("127.0.0.1", 6443, "sqlite", 300.0)
    assert c.url == "http://127.0.0.1:6443" and c.security is None
    nl = c.node_lifecycle.settings()  # kube-controller-manager's defaults (grace period 50 s since 1.32)
    assert (nl.monitor_grace, nl.startup_grace, nl.monitor_period) == (50.0, 60.0, 5.0)
    assert (nl.rates.eviction, nl.rates.secondary, nl.rates.unhealthy_threshold, nl.rates.large_cluster) == (
        0.1, 0.01, 0.55, 50)


@pytest.mark.parametrize(("data", "problem"), [
    ({"address": "0.0.0.0"}, "is not a loopback address"),
    ({"bogus": 1}, "bogus: unknown field"),
    ({"storage": {"backend": "etcd"}}, "storage.backend"),
    ({"storage": {"path": "relative.db"}}, "must be an absolute path"),
    ({"compactionInterval": "0s"}, "must be positive"),
    ({"security": {"authorizationMode": ["RBAC", "RBAC"]}}, "specified more than once"),
    ({"nodeLifecycle": {"nodeMonitorGracePeriod": "0s"}}, "nodeLifecycle.nodeMonitorGracePeriod"),
    ({"nodeLifecycle": {"unhealthyZoneThreshold": 1.5}}, "nodeLifecycle.unhealthyZoneThreshold"),
    ({"nodeLifecycle": {"nodeEvictionRate": -1}}, "nodeLifecycle.nodeEvictionRate"),
])
def test_problems_name_their_key(data, problem) -> None:
    with pytest.raises(ConfigError) as e:
        parse_server_config(data, "t")
    assert any(problem in line for line in e.value.errors), e.value.errors


def test_security_allows_other_addresses_and_https() -> None:
    c = parse_server_config({"address": "0.0.0.0", "security": {"tokenAuthFile": "/etc/t.csv"}}, "t")
    assert c.url == "https://0.0.0.0:6443" and c.security is not None
    assert c.security.authorization_mode == ("Node", "RBAC")


def test_check_config_command(tmp_path, capsys) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("port: 0\nstorage: {backend: memory, path: /tmp/x/state.db}\n")
    assert main(["server", "check-config", "--config", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["storage"]["backend"] == "memory"
    f.write_text("address: 10.0.0.1\n")
    assert main(["server", "check-config", "--config", str(f)]) == 1
    assert "not a loopback address" in capsys.readouterr().err
    assert main(["server", "kubeconfig", "--config", str(tmp_path / "missing.yaml")]) == 1
