"""Config loading: kubelet names and defaults, strict keys, every error named by its key."""

from __future__ import annotations

import socket
from pathlib import Path

import pydantic
import pytest

from nodeagent.agent.config import settings as config_module
from nodeagent.agent.config.reload import plan
from nodeagent.agent.config.settings import (
    Config,
    ConfigError,
    config_warnings,
    default_config_text,
    effective_eviction_hard,
    load_config,
    load_default_config,
    parse_config,
    parse_yaml,
    restart_required_changes,
)
from nodeagent.agent.config.thresholds import DEFAULT_EVICTION_HARD
from nodeagent.core.duration import format_go_duration, parse_go_duration
from nodeagent.core.quantity import parse_quantity

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "config" / "nodeagent.yaml"


def errors_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml")  # type: ignore[arg-type]
    assert info.value.source == "test.yaml"
    return info.value.errors


def yaml_errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_yaml(text, "test.yaml")
    return info.value.errors


# ---- defaults ----


def test_defaults_are_the_kubelets() -> None:
    c = parse_config({}, "empty")
    assert c.eviction_hard == {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    }
    assert c.eviction_soft == {} and c.eviction_soft_grace_period == {} and c.eviction_minimum_reclaim == {}
    assert c.eviction_max_pod_grace_period == 0
    assert c.eviction_pressure_transition_period == 300.0
    assert c.merge_default_eviction_settings is False
    assert c.enforce_node_allocatable == ("pods",)
    assert c.max_pods == 110
    assert c.kube_reserved == {} and c.system_reserved == {}


def test_defaults_of_our_own_keys() -> None:
    c = parse_config({}, "empty")
    assert (c.address, c.port) == ("127.0.0.1", 10250)
    assert (c.cgroup_root, c.cgroup_driver) == ("/", "auto")
    assert c.state_dir == "/var/lib/nodeagent"
    assert c.nodefs_path == c.state_dir and c.imagefs_path == c.state_dir
    assert c.static_pod_path is None
    assert c.housekeeping_interval == 10.0
    assert c.nice == -10
    assert (c.logging.level, c.logging.format) == ("info", "auto")
    assert c.node_name == socket.gethostname().strip().lower()


def test_default_thresholds_with_allocatable_copy() -> None:
    c = parse_config({}, "empty")
    assert [t.signal for t in c.thresholds] == [*DEFAULT_EVICTION_HARD, "allocatableMemory.available"]
    assert all(t.hard for t in c.thresholds)
    assert parse_config({"enforceNodeAllocatable": []}, "x").thresholds[-1].signal == "imagefs.inodesFree"


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing but a comment\n")
    assert load_config(path) == parse_config({}, "other")


def test_embedded_defaults_yaml_adds_nothing_but_apiversion() -> None:
    embedded = load_default_config()
    assert (embedded.api_version, embedded.kind) == ("nodeagent.io/v1alpha1", "NodeAgentConfiguration")
    assert embedded.model_copy(update={"api_version": None, "kind": None}) == parse_config({}, "x")
    assert "apiVersion" in default_config_text()


def test_example_config_loads_and_names_every_key() -> None:
    c = load_config(EXAMPLE)
    text = EXAMPLE.read_text()
    for key in c.to_dict():
        assert f"\n{key}:" in text, f"config/nodeagent.yaml lacks {key}"
    assert (c.state_dir, c.address, c.port, c.cgroup_root) == ("/var/lib/nodeagent", "127.0.0.1", 10250, "/")
    assert config_warnings(c) == []


def test_kubelet_apiversion_and_kind_accepted() -> None:
    c = parse_config({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}, "x")
    assert c.kind == "KubeletConfiguration"


# ---- evictionHard defaulting, as the kubelet's loadConfigFile ----


def test_partial_eviction_hard_replaces_the_defaults() -> None:
    c = parse_config({"evictionHard": {"memory.available": "500Mi"}}, "x")
    assert c.eviction_hard == {"memory.available": "500Mi"}
    assert [t.signal for t in c.hard_thresholds if t.signal != "allocatableMemory.available"] == ["memory.available"]
    assert any("nodefs.available" in w and "mergeDefaultEvictionSettings" in w for w in config_warnings(c))


def test_merge_default_eviction_settings_fills_missing_signals() -> None:
    c = parse_config({"evictionHard": {"memory.available": "500Mi"}, "mergeDefaultEvictionSettings": True}, "x")
    assert c.eviction_hard == {**DEFAULT_EVICTION_HARD, "memory.available": "500Mi"}
    assert config_warnings(c) == []


def test_null_eviction_hard_gets_defaults_and_empty_map_disables_all() -> None:
    assert parse_config({"evictionHard": None}, "x").eviction_hard == DEFAULT_EVICTION_HARD
    assert parse_config({"evictionHard": {}}, "x").thresholds == ()
    assert effective_eviction_hard({}, True) == DEFAULT_EVICTION_HARD


def test_numbers_in_eviction_maps_are_read_as_quantities() -> None:
    c = parse_config({"evictionHard": {"nodefs.inodesFree": 1000}}, "x")
    assert c.thresholds[0].quantity == parse_quantity("1000")


# ---- errors ----


def test_unknown_key_is_an_error_with_a_hint() -> None:
    assert errors_of({"evictionHrad": {"memory.available": "1Gi"}}) == [
        "evictionHrad: unknown field (did you mean evictionHard?)"
    ]


def test_unknown_nested_and_snake_case_keys_are_errors() -> None:
    assert errors_of({"logging": {"fmt": "json"}}) == ["logging.fmt: unknown field"]
    assert errors_of({"state_dir": "/x"})[0].startswith("state_dir: unknown field")


def test_scheduler_keys() -> None:
    c = parse_config({"schedulerURL": "http://10.0.0.1:10251/", "schedulerTokenFile": "/etc/t",
                      "nodeStatusUpdateFrequency": "3s"}, "x")
    assert (c.scheduler_url, c.scheduler_token_file, c.node_status_update_frequency) == \
        ("http://10.0.0.1:10251", "/etc/t", 3.0)
    assert parse_config({}, "x").scheduler_url is None
    assert parse_config({}, "x").node_status_update_frequency == 10.0
    assert errors_of({"schedulerURL": "ftp://x"})[0].startswith("schedulerURL: must be an http")
    assert errors_of({"schedulerURL": {}})[0].startswith("schedulerURL: ")
    assert errors_of({"schedulerTokenFile": "t"})[0].startswith("schedulerTokenFile: must be an absolute")
    assert errors_of({"nodeStatusUpdateFrequency": "0s"})[0].startswith("nodeStatusUpdateFrequency: must be positive")
    assert errors_of({"schedulerUrl": "http://x"})[0].startswith("schedulerUrl: unknown field")


def test_soft_threshold_without_grace_period() -> None:
    errors = errors_of({"evictionSoft": {"memory.available": "1Gi"}})
    assert len(errors) == 1
    assert errors[0].startswith("evictionSoftGracePeriod.memory.available: ")
    assert "evictionSoft.memory.available" in errors[0]


@pytest.mark.parametrize(
    ("data", "prefix"),
    [
        ({"housekeepingInterval": "10"}, "housekeepingInterval: "),
        ({"housekeepingInterval": 10}, "housekeepingInterval: "),
        ({"housekeepingInterval": "0s"}, "housekeepingInterval: must be positive"),
        ({"evictionPressureTransitionPeriod": "5 m"}, "evictionPressureTransitionPeriod: "),
        ({"evictionPressureTransitionPeriod": "-1m"}, "evictionPressureTransitionPeriod: must not be negative"),
        ({"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1x"}},
         "evictionSoftGracePeriod.memory.available: "),
        ({"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "-30s"}},
         "evictionSoftGracePeriod.memory.available: grace period must not be negative"),
    ],
)
def test_bad_durations(data: dict, prefix: str) -> None:
    errors = errors_of(data)
    assert len(errors) == 1 and errors[0].startswith(prefix), errors


@pytest.mark.parametrize(
    ("data", "prefix"),
    [
        ({"evictionHard": {"nodefs.available": "-5%"}}, "evictionHard.nodefs.available: percentage must be >= 0%"),
        ({"evictionHard": {"nodefs.available": "150%"}}, "evictionHard.nodefs.available: percentage must be <= 100%"),
        ({"evictionSoft": {"memory.available": "101%"}, "evictionSoftGracePeriod": {"memory.available": "1s"}},
         "evictionSoft.memory.available: percentage must be <= 100%"),
        ({"evictionHard": {"memory.available": "-100Mi"}}, "evictionHard.memory.available: threshold must be positive"),
        ({"evictionMinimumReclaim": {"memory.available": "-1Mi"}}, "evictionMinimumReclaim.memory.available: "),
        ({"evictionHard": {"memory.availabel": "1Gi"}}, "evictionHard.memory.availabel: unsupported eviction signal"),
    ],
)
def test_bad_thresholds_name_the_key(data: dict, prefix: str) -> None:
    errors = errors_of(data)
    assert len(errors) == 1 and errors[0].startswith(prefix), errors


@pytest.mark.parametrize(
    ("data", "prefix"),
    [
        ({"port": 0}, "port: "),
        ({"port": 70000}, "port: "),
        ({"address": "localhost"}, "address: must be an IP address"),
        ({"stateDir": "var/lib/x"}, "stateDir: must be an absolute path"),
        ({"cgroupRoot": "kubepods"}, "cgroupRoot: must be an absolute path"),
        ({"cgroupDriver": "systemd"}, "cgroupDriver: "),
        ({"maxPods": -1}, "maxPods: "),
        ({"evictionMaxPodGracePeriod": -1}, "evictionMaxPodGracePeriod: "),
        ({"kubeReserved": {"gpu": "1"}}, "kubeReserved.gpu: "),
        ({"systemReserved": {"memory": "-1Gi"}}, "systemReserved.memory: must not be negative"),
        ({"systemReserved": {"memory": "lots"}}, "systemReserved.memory: "),
        ({"enforceNodeAllocatable": ["pods", "nodes"]}, "enforceNodeAllocatable[1]: "),
        ({"enforceNodeAllocatable": ["pods", "none"]}, "enforceNodeAllocatable: may not contain other"),
        ({"enforceNodeAllocatable": ["system-reserved"]}, "enforceNodeAllocatable: \"system-reserved\" needs systemReservedCgroup"),
        ({"logging": {"level": "trace"}}, "logging.level: "),
        ({"nodeName": "Not_A_Name"}, "nodeName: "),
        ({"kind": "Pod"}, "kind: unsupported kind"),
        ({"apiVersion": "v1"}, "apiVersion: unsupported apiVersion"),
        ({"apiVersion": "nodeagent.io/v1alpha1", "kind": "KubeletConfiguration"}, "kind: must be \"NodeAgentConfiguration\""),
    ],
)
def test_bad_values_name_the_key(data: dict, prefix: str) -> None:
    errors = errors_of(data)
    assert len(errors) == 1 and errors[0].startswith(prefix), errors


def test_every_error_reported_at_once() -> None:
    errors = errors_of({"evictionHrad": {}, "port": 0, "evictionSoft": {"memory.available": "1Gi"}})
    assert sorted(e.split(":")[0] for e in errors) == ["evictionHrad", "evictionSoftGracePeriod.memory.available", "port"]


def test_a_bad_value_type_is_reported_once() -> None:
    assert errors_of({"evictionHard": {"memory.available": {"nested": 1}}}) == [
        "evictionHard.memory.available: Input should be a valid string"
    ]


def test_node_name_defaults_to_the_lowercased_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module.socket, "gethostname", lambda: "Build-Host.Example.COM")
    assert parse_config({}, "x").node_name == "build-host.example.com"
    monkeypatch.setattr(config_module.socket, "gethostname", lambda: "bad_host")
    errors = errors_of({})
    assert len(errors) == 1 and errors[0].startswith("nodeName: defaults to the hostname")
    assert parse_config({"nodeName": "node-1"}, "x").node_name == "node-1"


# ---- YAML ----


def test_yaml_syntax_error_is_one_line_with_the_line_number() -> None:
    errors = yaml_errors("port: 10250\nevictionHard:\n  memory.available: [100Mi\n")
    assert len(errors) == 1
    assert errors[0].startswith("line ") and "invalid YAML" in errors[0]


def test_yaml_duplicate_key_is_an_error() -> None:
    errors = yaml_errors("port: 1\naddress: 127.0.0.1\nport: 2\n")
    assert errors == ["line 3, column 1: invalid YAML: duplicate key 'port'"]


def test_yaml_root_must_be_a_mapping() -> None:
    assert yaml_errors("- port\n") == ["(root): expected a mapping of configuration keys, got list"]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.yaml")
    assert info.value.source.endswith("missing.yaml")
    assert "cannot read config" in info.value.errors[0]
    assert str(info.value).startswith(f"{tmp_path / 'missing.yaml'}: ")


# ---- immutability, round trip, reload diff ----


def test_config_is_frozen() -> None:
    c = parse_config({}, "x")
    with pytest.raises(pydantic.ValidationError):
        c.port = 1  # type: ignore[misc]


def test_effective_config_round_trips() -> None:
    c = load_config(EXAMPLE)
    again = parse_config(c.to_dict(), "dumped")
    assert again == c
    assert again.thresholds == c.thresholds


@pytest.mark.parametrize(("value", "message"), [(-21, "greater than or equal to -20"),
                                              (20, "less than or equal to 19"), ("high", "integer")])
def test_nice_is_a_nice_value(value: object, message: str) -> None:
    errors = errors_of({"nice": value})
    assert len(errors) == 1 and errors[0].startswith("nice: ") and message in errors[0], errors


def test_nice_takes_a_restart() -> None:
    assert restart_required_changes(parse_config({}, "old"), parse_config({"nice": 0}, "new")) == ["nice"]


def test_restart_required_changes() -> None:
    old = parse_config({}, "old")
    assert restart_required_changes(old, parse_config({}, "new")) == []
    new = parse_config(
        {"port": 10251, "cgroupRoot": "/x", "stateDir": "/srv/na", "maxPods": 5, "evictionHard": {}}, "new"
    )
    # the default unixSocket, nodefsPath and imagefsPath live under stateDir, so they move with it
    assert restart_required_changes(old, new) == ["port", "cgroupRoot", "stateDir", "unixSocket", "nodefsPath",
                                                  "imagefsPath"]
    assert restart_required_changes(old, parse_config({"address": "::1", "cgroupDriver": "v1"}, "n")) == [
        "address",
        "cgroupDriver",
    ]


@pytest.mark.parametrize("value", ["auto", "runc", "crun", "none"])
def test_oci_runtime_values(value: str) -> None:
    assert parse_config({"ociRuntime": value}, "x").oci_runtime == value


def test_oci_runtime_defaults_to_auto() -> None:
    assert parse_config({}, "x").oci_runtime == "auto"
    assert parse_config({}, "x").to_dict()["ociRuntime"] == "auto"


@pytest.mark.parametrize("value", ["docker", "RUNC", "", 1, None])
def test_oci_runtime_refuses_other_values_naming_the_key(value: object) -> None:
    errors = errors_of({"ociRuntime": value})
    assert len(errors) == 1 and errors[0].startswith("ociRuntime: "), errors
    assert "'auto', 'runc', 'crun' or 'none'" in errors[0], errors


@pytest.mark.parametrize(("change", "keys"), [
    ({"ociRuntime": "crun"}, ["ociRuntime"]),
    ({"ociRuntime": "none"}, ["ociRuntime"]),
    ({"imagefsPath": "/srv/images"}, ["imagefsPath"]),  # the image store lives there
    ({"nodefsPath": "/srv/node"}, ["nodefsPath", "imagefsPath"]),  # imagefs defaults to nodefs
    ({"imageGCHighThresholdPercent": 90, "imagePullProgressTimeout": "1m"}, []),  # applied live
])
def test_image_keys_restart_or_not(change: dict[str, object], keys: list[str]) -> None:
    old = parse_config({}, "old")
    new = parse_config(change, "new")
    assert restart_required_changes(old, new) == keys
    result = plan(old, new)
    assert result.restart_required == keys and not set(result.applied) & set(keys)
    assert set(result.applied) | set(result.restart_required) == set(change) | set(keys)


def test_warnings_for_unused_settings() -> None:
    c = parse_config(
        {"evictionSoftGracePeriod": {"memory.available": "30s"}, "evictionMinimumReclaim": {"pid.available": "10"}}, "x"
    )
    assert config_warnings(c) == [
        "evictionSoftGracePeriod.memory.available: no evictionSoft.memory.available threshold; ignored",
        "evictionMinimumReclaim.pid.available: no threshold for this signal; ignored",
    ]


# ---- Go durations ----


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [
        ("30s", 30.0, "30s"),
        ("1m30s", 90.0, "1m30s"),
        ("1h", 3600.0, "1h0m0s"),
        ("1.5h", 5400.0, "1h30m0s"),
        ("500ms", 0.5, "500ms"),
        ("0", 0.0, "0s"),
        ("5m", 300.0, "5m0s"),
        ("1h2m3.5s", 3723.5, "1h2m3.5s"),
        ("+2s", 2.0, "2s"),
        ("-1.5s", -1.5, "-1.5s"),
        (".5s", 0.5, "500ms"),
        ("1us", 1e-6, "1µs"),
        ("250ns", 2.5e-7, "250ns"),
    ],
)
def test_parse_go_duration(text: str, seconds: float, canonical: str) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)
    assert format_go_duration(parse_go_duration(text)) == canonical


@pytest.mark.parametrize("text", ["", "10", "1.5", "s", "1x", "1 s", "--1s", ".s", "1e3s", "1d", "3000000h"])
def test_parse_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


def test_durations_serialize_as_go_strings() -> None:
    dumped = parse_config({"housekeepingInterval": "1m30s"}, "x").to_dict()
    assert dumped["housekeepingInterval"] == "1m30s"
    assert dumped["evictionPressureTransitionPeriod"] == "5m0s"
    assert isinstance(Config.model_fields["housekeeping_interval"].default, float)
