"""The server config's `controllers` key (kube-controller-manager's --controllers semantics)."""

from __future__ import annotations

import pytest

from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.core.clock import FakeClock
from nodeagent.daemonkit.configfile import ConfigError

ALL = ["replicaset", "deployment", "garbagecollector", "job", "cronjob", "ttl-after-finished", "daemonset",
       "nodelifecycle", "disruption", "horizontalpodautoscaling", "vpa-recommender", "vpa-updater", "serviceaccount", "root-ca-cert-publisher"]


@pytest.mark.parametrize(("value", "enabled"), [
    (None, ALL),
    (["*"], ALL),
    ([], []),
    (["replicaset"], ["replicaset"]),
    (["*", "-garbagecollector"], ["replicaset", "deployment", "job", "cronjob", "ttl-after-finished",
                                  "daemonset", "nodelifecycle", "disruption", "horizontalpodautoscaling",
                                  "vpa-recommender", "vpa-updater", "serviceaccount",
                                  "root-ca-cert-publisher"]),
    (["deployment", "replicaset"], ["replicaset", "deployment"]),
    (["-deployment"], []),
    (["job", "ttl-after-finished"], ["job", "ttl-after-finished"]),
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
    m = ControllerManager(client=None, clock=FakeClock(), enabled=["job", "cronjob", "ttl-after-finished"])  # type: ignore[arg-type]
    assert [c.name for c in m.controllers] == ["job", "cronjob", "ttl-after-finished"]
    assert sorted(k for _, k in m.informers) == ["CronJob", "Job", "Pod"]  # shared: one Job informer for three
    with pytest.raises(ValueError, match="unknown controllers: statefulset"):
        ControllerManager(client=None, clock=FakeClock(), enabled=["statefulset"])  # type: ignore[arg-type]


def test_hpa_settings_come_from_the_server_config() -> None:
    from nodeagent.cluster.controlplane import hpa_settings
    default = hpa_settings(parse_server_config({}, "t"), 17.0)
    assert (default.period, default.fast, default.metric_window, default.metric_max_age) == (15.0, None, 17.0, 17.0)
    assert default.controller.downscale_stabilization == 300.0 and default.controller.tolerance == 0.1
    assert default.controller.calculator.cpu_initialization_period == 300.0
    config = parse_server_config({"horizontalPodAutoscaler": {
        "syncPeriod": "5s", "tolerance": 0.2, "downscaleStabilization": "1m", "initialReadinessDelay": "10s",
        "fast": True}}, "t")
    s = hpa_settings(config, 3.0)
    assert s.sync_period == 5.0 and s.controller.tolerance == 0.2 and s.controller.downscale_stabilization == 60.0
    assert s.controller.calculator.delay_of_initial_readiness_status == 10.0
    assert s.fast is not None and s.fast.down_stabilization == 60.0 and s.period == s.fast.sync_period == 1.0
    with pytest.raises(ConfigError) as e:
        parse_server_config({"horizontalPodAutoscaler": {"syncPerod": "5s"}}, "server.yaml")
    assert "syncPerod" in str(e.value)


def test_vpa_settings_come_from_the_server_config() -> None:
    """The periods and the upstream flags a short-lived cluster needs; upstream's defaults otherwise."""
    from nodeagent.cluster.controlplane import vpa_settings
    default = vpa_settings(parse_server_config({}, "t"))
    assert (default.recommender_interval, default.updater_interval) == (60.0, 60.0)
    assert (default.recommender.pod_min_memory_mb, default.recommender.pod_min_cpu_millicores) == (250.0, 25.0)
    assert default.updater.pod_lifetime_threshold == 12 * 3600.0
    s = vpa_settings(parse_server_config({"verticalPodAutoscaler": {
        "recommenderInterval": "1s", "podRecommendationMinMemoryMb": 16, "podRecommendationMinCpuMillicores": 5,
        "inRecommendationBoundsEvictionLifetimeThreshold": "10s"}}, "t"))
    assert s.recommender_interval == 1.0 and s.recommender.pod_min_memory_mb == 16.0
    assert s.recommender.pod_min_cpu_millicores == 5.0 and s.updater.pod_lifetime_threshold == 10.0
    with pytest.raises(ConfigError) as e:
        parse_server_config({"verticalPodAutoscaler": {"podRecommendationMinMemoryMb": -1}}, "server.yaml")
    assert "podRecommendationMinMemoryMb" in str(e.value)
