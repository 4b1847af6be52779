"""The server config's `controllers` key (kube-controller-manager's --controllers semantics)."""

from __future__ import annotations

import pytest

from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.core.clock import FakeClock
from nodeagent.daemonkit.configfile import ConfigError

ALL = ["replicaset", "deployment", "garbagecollector", "horizontalpodautoscaling"]


@pytest.mark.parametrize(("value", "enabled"), [
    (None, ALL),
    (["*"], ALL),
    ([], []),
    (["replicaset"], ["replicaset"]),
    (["*", "-garbagecollector"], ["replicaset", "deployment", "horizontalpodautoscaling"]),
    (["deployment", "replicaset"], ["replicaset", "deployment"]),
    (["-deployment"], []),
])
def test_enabled_controllers(value: list[str] | None, enabled: list[str]) -> None:
    data = {} if value is None else {"controllers": value}
    assert parse_server_config(data, "t").enabled_controllers == enabled


def test_unknown_controller_is_refused_with_its_key() -> None:
    with pytest.raises(ConfigError) as e:
        parse_server_config({"controllers": ["*", "-jobs"]}, "server.yaml")
    assert "controllers: unknown controller '-jobs'" in str(e.value)


def test_manager_builds_only_what_is_enabled() -> None:
    m = ControllerManager(client=None, clock=FakeClock(), enabled=["replicaset"])  # type: ignore[arg-type]
    assert [c.name for c in m.controllers] == ["replicaset"]
    assert sorted(k for _, k in m.informers) == ["Pod", "ReplicaSet"]
    with pytest.raises(ValueError, match="unknown controllers: daemonset"):
        ControllerManager(client=None, clock=FakeClock(), enabled=["daemonset"])  # type: ignore[arg-type]
