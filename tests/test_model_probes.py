"""Probes, lifecycle hooks, env sources, termination messages and init containers in the Pod model:
Kubernetes defaulting, validation messages under the full field path, and round trips."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import parse_pod
from nodeagent.core.model.actions import GRPCAction, HTTPGetAction

BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "a", "command": ["sleep", "100"]}]},
}


def manifest(**container: Any) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    m["spec"]["containers"][0].update(container)
    return m


def errors_of(m: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationErrors) as exc:
        parse_pod(m)
    return [str(e) for e in exc.value.errors]


def test_probe_defaults_as_kubernetes() -> None:
    pod = parse_pod(manifest(livenessProbe={"httpGet": {"port": 8080}}, readinessProbe={"tcpSocket": {"port": "http"}},
                             startupProbe={"exec": {"command": ["true"]}, "periodSeconds": 0, "failureThreshold": 0}))
    c = pod.spec.containers[0]
    assert c.liveness_probe is not None and c.readiness_probe is not None and c.startup_probe is not None
    live = c.liveness_probe
    assert (live.initial_delay_seconds, live.timeout_seconds, live.period_seconds) == (0, 1, 10)
    assert (live.success_threshold, live.failure_threshold) == (1, 3)
    assert live.termination_grace_period_seconds is None
    assert isinstance(live.handler, HTTPGetAction)
    assert (live.handler.path, live.handler.scheme, live.handler.host) == ("/", "HTTP", None)
    assert c.readiness_probe.handler.port == "http"  # type: ignore[union-attr]
    # zero means "the default" for these fields, as SetDefaults_Probe
    assert (c.startup_probe.period_seconds, c.startup_probe.failure_threshold) == (10, 3)


def test_defaults_are_not_written_back() -> None:
    """A manifest reads back as written: defaults live in the model, not in to_dict()."""
    probe = {"httpGet": {"path": "/healthz", "port": 8080}}
    d = parse_pod(manifest(livenessProbe=probe)).to_dict()
    assert d["spec"]["containers"][0]["livenessProbe"] == probe
    assert "terminationMessagePath" not in d["spec"]["containers"][0]
    explicit = {"httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10}
    assert parse_pod(manifest(livenessProbe=explicit)).to_dict()["spec"]["containers"][0]["livenessProbe"] == explicit


def test_termination_message_defaults() -> None:
    c = parse_pod(manifest()).spec.containers[0]
    assert (c.termination_message_path, c.termination_message_policy) == ("/dev/termination-log", "File")
    c = parse_pod(manifest(terminationMessagePolicy="FallbackToLogsOnError", terminationMessagePath="/tmp/m")).spec.containers[0]
    assert (c.termination_message_path, c.termination_message_policy) == ("/tmp/m", "FallbackToLogsOnError")


FULL_CONTAINER: dict[str, Any] = {
    "livenessProbe": {"httpGet": {"path": "/live", "port": "http", "host": "127.0.0.1", "scheme": "HTTPS",
                                  "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
                      "initialDelaySeconds": 5, "timeoutSeconds": 2, "periodSeconds": 3, "successThreshold": 1,
                      "failureThreshold": 4, "terminationGracePeriodSeconds": 7},
    "readinessProbe": {"grpc": {"port": 9090, "service": "svc"}, "successThreshold": 2},
    "startupProbe": {"tcpSocket": {"port": 8080}, "failureThreshold": 30},
    "lifecycle": {"postStart": {"exec": {"command": ["touch", "/tmp/x"]}},
                  "preStop": {"sleep": {"seconds": 5}}},
    "terminationMessagePath": "/tmp/msg",
    "terminationMessagePolicy": "FallbackToLogsOnError",
    "ports": [{"name": "http", "containerPort": 8080}],
    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['app']"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": True}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
            {"name": "PLAIN", "value": "x"}],
    "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec", "optional": True}}],
}


def test_full_container_round_trips() -> None:
    m = manifest(**copy.deepcopy(FULL_CONTAINER))
    m["spec"]["initContainers"] = [
        {"name": "setup", "command": ["true"]},
        {"name": "proxy", "command": ["sleep", "inf"], "restartPolicy": "Always",
         "readinessProbe": {"exec": {"command": ["true"]}}},
    ]
    m["spec"]["serviceAccountName"] = "builder"
    pod = parse_pod(m)
    again = parse_pod(pod.to_dict())
    assert again == pod
    d = pod.to_dict()
    for key, value in FULL_CONTAINER.items():
        assert d["spec"]["containers"][0][key] == value, key
    assert [c["name"] for c in d["spec"]["initContainers"]] == ["setup", "proxy"]
    assert pod.spec.init_containers[1].is_sidecar and not pod.spec.init_containers[0].is_sidecar
    assert pod.spec.containers[0].named_port("http") == 8080
    assert pod.spec.containers[0].named_port("nope") is None
    grpc = pod.spec.containers[0].readiness_probe.handler  # type: ignore[union-attr]
    assert isinstance(grpc, GRPCAction) and grpc.service == "svc"


def test_init_container_limits_default_requests() -> None:
    m = manifest()
    m["spec"]["initContainers"] = [{"name": "i", "command": ["true"], "resources": {"limits": {"memory": "1Gi"}}}]
    init = parse_pod(m).spec.init_containers[0]
    assert str(init.requests["memory"]) == "1Gi"


C = "spec.containers[0]"
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("no-handler", {"livenessProbe": {"periodSeconds": 5}}, f"{C}.livenessProbe: Required value: must specify a handler type"),
    ("two-handlers", {"readinessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}},
     f"{C}.readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"),
    ("exec-no-command", {"livenessProbe": {"exec": {}}}, f"{C}.livenessProbe.exec.command: Required value"),
    ("negative-period", {"livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": -1}},
     f"{C}.livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"),
    ("negative-delay", {"startupProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": -3}},
     f"{C}.startupProbe.initialDelaySeconds: Invalid value: -3: must be greater than or equal to 0"),
    ("period-string", {"livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": "10"}},
     f"{C}.livenessProbe.periodSeconds: Invalid value: \"10\": must be a valid integer"),
    ("liveness-success-2", {"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}},
     f"{C}.livenessProbe.successThreshold: Invalid value: 2: must be 1"),
    ("startup-success-3", {"startupProbe": {"exec": {"command": ["true"]}, "successThreshold": 3}},
     f"{C}.startupProbe.successThreshold: Invalid value: 3: must be 1"),
    ("readiness-grace", {"readinessProbe": {"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 5}},
     f"{C}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"),
    ("liveness-grace-zero", {"livenessProbe": {"exec": {"command": ["true"]}, "terminationGracePeriodSeconds": 0}},
     f"{C}.livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0"),
    ("port-zero", {"livenessProbe": {"httpGet": {"port": 0}}},
     f"{C}.livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"),
    ("port-big", {"livenessProbe": {"tcpSocket": {"port": 70000}}},
     f"{C}.livenessProbe.tcpSocket.port: Invalid value: 70000: must be between 1 and 65535, inclusive"),
    ("port-digits-string", {"livenessProbe": {"httpGet": {"port": "8080"}}},
     f"{C}.livenessProbe.httpGet.port: Invalid value: \"8080\": must contain at least one letter (a-z)"),
    ("port-name-long", {"livenessProbe": {"httpGet": {"port": "a-very-long-port-name"}}},
     f"{C}.livenessProbe.httpGet.port: Invalid value: \"a-very-long-port-name\": must be no more than 15 characters"),
    ("port-name-upper", {"livenessProbe": {"httpGet": {"port": "HTTP"}}},
     f"{C}.livenessProbe.httpGet.port: Invalid value: \"HTTP\": must contain only alpha-numeric characters"),
    ("port-name-hyphens", {"livenessProbe": {"httpGet": {"port": "a--b"}}},
     f"{C}.livenessProbe.httpGet.port: Invalid value: \"a--b\": must not contain consecutive hyphens"),
    ("port-missing", {"livenessProbe": {"httpGet": {"path": "/"}}}, f"{C}.livenessProbe.httpGet.port: Required value"),
    ("scheme", {"livenessProbe": {"httpGet": {"port": 80, "scheme": "http"}}},
     f'{C}.livenessProbe.httpGet.scheme: Unsupported value: "http": supported values: "HTTP", "HTTPS"'),
    ("header-name", {"livenessProbe": {"httpGet": {"port": 80, "httpHeaders": [{"name": "X Bad", "value": "v"}]}}},
     f'{C}.livenessProbe.httpGet.httpHeaders: Invalid value: "X Bad": a valid HTTP header must consist'),
    ("grpc-port-name", {"livenessProbe": {"grpc": {"port": "grpc"}}}, f"{C}.livenessProbe.grpc.port: Invalid value: \"grpc\""),
    ("grpc-port-zero", {"livenessProbe": {"grpc": {"port": 0}}},
     f"{C}.livenessProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive"),
    ("probe-typo", {"livenessProbe": {"exec": {"command": ["true"]}, "periodSecond": 1}},
     f'{C}.livenessProbe.periodSecond: unknown field "periodSecond"'),
    ("lifecycle-no-handler", {"lifecycle": {"preStop": {}}}, f"{C}.lifecycle.preStop: Required value: must specify a handler type"),
    ("lifecycle-two", {"lifecycle": {"postStart": {"exec": {"command": ["a"]}, "sleep": {"seconds": 1}}}},
     f"{C}.lifecycle.postStart.sleep: Forbidden: may not specify more than 1 handler type"),
    ("sleep-over-grace", {"lifecycle": {"preStop": {"sleep": {"seconds": 31}}}},
     f"{C}.lifecycle.preStop.sleep.seconds: Invalid value: 31: must be non-negative and less than terminationGracePeriodSeconds (30)"),
    ("sleep-negative", {"lifecycle": {"preStop": {"sleep": {"seconds": -1}}}},
     f"{C}.lifecycle.preStop.sleep.seconds: Invalid value: -1"),
    ("lifecycle-grpc", {"lifecycle": {"preStop": {"grpc": {"port": 1}}}}, f'{C}.lifecycle.preStop.grpc: unknown field "grpc"'),
    ("message-policy", {"terminationMessagePolicy": "Always"},
     f'{C}.terminationMessagePolicy: Unsupported value: "Always": supported values: "File", "FallbackToLogsOnError"'),
    ("restart-policy-app", {"restartPolicy": "Always"}, f"{C}.restartPolicy: Forbidden: may not be set for non-init containers"),
    ("value-and-value-from", {"env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
     f'{C}.env[0].valueFrom: Invalid value: "": may not be specified when `value` is not empty'),
    ("two-sources", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                                         "secretKeyRef": {"name": "s", "key": "k"}}}]},
     f'{C}.env[0].valueFrom: Invalid value: "": may not have more than one field specified at a time'),
    ("field-path", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]},
     f'{C}.env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.hostname": supported values: "metadata.name"'),
    ("field-path-labels-whole", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]},
     f'{C}.env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "metadata.labels"'),
    ("field-subscript", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name['x']"}}}]},
     f'{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: "metadata.name[\'x\']": does not support subscript'),
    ("field-label-key", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a b']"}}}]},
     f'{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: "a b"'),
    ("field-version", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}}}]},
     f"{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"metadata.name\": error converting fieldPath: unsupported pod version: v2"),
    ("field-path-missing", {"env": [{"name": "A", "valueFrom": {"fieldRef": {}}}]},
     f"{C}.env[0].valueFrom.fieldRef.fieldPath: Required value"),
    ("resource", {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}]},
     f'{C}.env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.gpu": supported values: "limits.cpu"'),
    ("cpu-divisor", {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "10m"}}}]},
     f'{C}.env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "limits.cpu": only divisor\'s values 1m and 1 are supported with the cpu resource'),
    ("memory-divisor", {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory", "divisor": "3"}}}]},
     f'{C}.env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "requests.memory": only divisor\'s values 1, 1k, 1M'),
    ("storage-divisor", {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.ephemeral-storage",
                                                                                 "divisor": "2Gi"}}}]},
     "are supported with the local ephemeral storage resource"),
    ("configmap-key", {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a/b"}}}]},
     f'{C}.env[0].valueFrom.configMapKeyRef.key: Invalid value: "a/b": a valid config key must consist'),
    ("secret-name", {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "S", "key": "k"}}}]},
     f'{C}.env[0].valueFrom.secretKeyRef.name: Invalid value: "S"'),
    ("configmap-name-missing", {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"key": "k"}}}]},
     f"{C}.env[0].valueFrom.configMapKeyRef.name: Required value"),
    ("env-from-none", {"envFrom": [{"prefix": "P_"}]},
     f'{C}.envFrom[0]: Invalid value: "": must specify one of: `configMapRef` or `secretRef`'),
    ("env-from-both", {"envFrom": [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]},
     f'{C}.envFrom[0]: Invalid value: "": may not have more than one field specified at a time'),
    ("env-from-prefix", {"envFrom": [{"prefix": "1=", "configMapRef": {"name": "a"}}]},
     f'{C}.envFrom[0].prefix: Invalid value: "1="'),
    ("env-from-typo", {"envFrom": [{"configMapRefs": {"name": "a"}}]}, f'{C}.envFrom[0].configMapRefs: unknown field'),
]


@pytest.mark.parametrize(("container", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_errors_name_the_field(container: dict[str, Any], expected: str) -> None:
    errors = errors_of(manifest(**container))
    assert any(expected in e for e in errors), errors


def _with_init(*init: dict[str, Any], containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    m["spec"]["initContainers"] = list(init)
    if containers is not None:
        m["spec"]["containers"] = containers
    return m


INIT = "spec.initContainers[0]"
INIT_CASES: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    ("name-clash-with-app", lambda: _with_init({"name": "a", "command": ["true"]}), f'{INIT}.name: Duplicate value: "a"'),
    ("name-clash-init", lambda: _with_init({"name": "i", "command": ["true"]}, {"name": "i", "command": ["true"]}),
     'spec.initContainers[1].name: Duplicate value: "i"'),
    ("probe-on-plain-init", lambda: _with_init({"name": "i", "command": ["true"], "livenessProbe": {"exec": {"command": ["true"]}}}),
     f"{INIT}.livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"),
    ("lifecycle-on-plain-init", lambda: _with_init({"name": "i", "command": ["true"], "lifecycle": {"preStop": {"sleep": {"seconds": 1}}}}),
     f"{INIT}.lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always"),
    ("init-restart-policy", lambda: _with_init({"name": "i", "command": ["true"], "restartPolicy": "OnFailure"}),
     f'{INIT}.restartPolicy: Unsupported value: "OnFailure": supported values: "Always"'),
    ("sidecar-probe-checked", lambda: _with_init({"name": "i", "command": ["x"], "restartPolicy": "Always",
                                                   "livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}}),
     f"{INIT}.livenessProbe.successThreshold: Invalid value: 2: must be 1"),
    ("init-command", lambda: _with_init({"name": "i"}), f"{INIT}.command: Required value"),
    ("init-resources", lambda: _with_init({"name": "i", "command": ["x"], "resources": {"requests": {"cpu": "-1"}}}),
     f"{INIT}.resources.requests.cpu: Invalid value"),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in INIT_CASES], ids=[c[0] for c in INIT_CASES])
def test_init_container_errors(make: Callable[[], dict[str, Any]], expected: str) -> None:
    errors = errors_of(make())
    assert any(expected in e for e in errors), errors


def test_sidecar_may_have_probes_and_lifecycle() -> None:
    pod = parse_pod(_with_init({"name": "proxy", "command": ["x"], "restartPolicy": "Always",
                                "startupProbe": {"tcpSocket": {"port": 1}},
                                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}))
    assert pod.spec.init_containers[0].startup_probe is not None


def test_lifecycle_tcp_socket_accepted_unchecked() -> None:
    pod = parse_pod(manifest(lifecycle={"postStart": {"tcpSocket": {"port": 99999}}}))
    assert pod.spec.containers[0].lifecycle.post_start.tcp_socket.port == 99999  # type: ignore[union-attr]


def test_sleep_zero_and_grace_bound_allowed() -> None:
    pod = parse_pod(manifest(lifecycle={"preStop": {"sleep": {"seconds": 30}}, "postStart": {"sleep": {"seconds": 0}}}))
    assert pod.spec.containers[0].lifecycle.pre_stop.sleep.seconds == 30  # type: ignore[union-attr]


def test_hugepages_resource_field_ref() -> None:
    pod = parse_pod(manifest(env=[{"name": "H", "valueFrom": {"resourceFieldRef": {"resource": "limits.hugepages-2Mi",
                                                                                   "divisor": "1Mi"}}}]))
    ref = pod.spec.containers[0].env[0].value_from.resource_field_ref  # type: ignore[union-attr]
    assert ref is not None and str(ref.effective_divisor) == "1Mi"


def test_annotation_subscript_uses_lowercase_key_rule() -> None:
    parse_pod(manifest(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['Example.com/Key']"}}}]))
