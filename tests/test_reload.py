"""What a reload applies live and what waits for a restart (pure)."""

from __future__ import annotations

from nodeagent.agent.config.reload import changed_keys, plan
from nodeagent.agent.config.settings import parse_config


def cfg(**data: object):
    return parse_config(dict(data), "test.yaml")


def test_identical_configs_change_nothing() -> None:
    assert changed_keys(cfg(), cfg()) == []
    assert plan(cfg(), cfg()).to_dict()["applied"] == []


def test_thresholds_and_reservations_apply_live() -> None:
    old = cfg(evictionHard={"memory.available": "100Mi"})
    new = cfg(evictionHard={"memory.available": "300Mi"}, kubeReserved={"memory": "1Gi"},
              logging={"level": "debug"})
    result = plan(old, new)
    assert result.ok
    assert sorted(result.applied) == ["evictionHard", "kubeReserved", "logging"]
    assert result.restart_required == []


def test_address_port_and_state_dir_need_a_restart() -> None:
    result = plan(cfg(), cfg(port=10999, stateDir="/var/lib/other", evictionSoft={"memory.available": "1Gi"},
                             evictionSoftGracePeriod={"memory.available": "30s"}))
    assert set(result.restart_required) >= {"port", "stateDir"}
    assert "port" not in result.applied and "evictionSoft" in result.applied
