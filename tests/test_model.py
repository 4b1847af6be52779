"""Pod manifests: parsing, Kubernetes defaulting, validation errors with field paths, round trip."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import parse_quantity

BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "a", "command": ["sleep", "100"]}]},
}


def manifest(edit: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    if edit is not None:
        edit(m)
    return m


def errors_of(m: Any) -> list[str]:
    with pytest.raises(ValidationErrors) as exc:
        parse_pod(m)
    assert isinstance(exc.value, ValueError)
    assert all(isinstance(e, FieldError) for e in exc.value.errors)
    return [str(e) for e in exc.value.errors]


def c0(m: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = m["spec"]["containers"][0]
    return container


@pytest.mark.parametrize(("image", "command", "args"), [("busybox:1", None, None), ("busybox:1", None, ["-c", "x"]),
                                                       ("busybox:1", ["sh"], None)])
def test_an_image_container_may_leave_command_to_the_image(image: str, command: list[str] | None,
                                                           args: list[str] | None) -> None:
    """Its Entrypoint/Cmd apply where command/args are absent (Kubernetes rules, runtime/oci/bundle.py)."""
    c: dict[str, Any] = {"name": "a", "image": image}
    c.update({k: v for k, v in (("command", command), ("args", args)) if v is not None})
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": [c]}})
    assert pod.spec.containers[0].command == (command or [])
    assert pod.spec.containers[0].args == (args or [])


def test_minimal_pod_gets_kubernetes_defaults() -> None:
    pod = parse_pod(manifest())
    assert pod.metadata.name == "web"
    assert pod.metadata.namespace == "default"
    assert uuid.UUID(pod.metadata.uid).version == 4
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.priority == 0
    assert pod.spec.priority_class_name is None
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.security_context is None
    assert pod.spec.containers[0].command == ["sleep", "100"]
    assert pod.spec.containers[0].requests == {}
    assert pod.key == "default/web"


def test_generated_uids_differ_and_given_uid_is_kept() -> None:
    assert parse_pod(manifest()).metadata.uid != parse_pod(manifest()).metadata.uid
    pod = parse_pod(manifest(lambda m: m["metadata"].update(uid="abc-123", namespace="prod")))
    assert pod.metadata.uid == "abc-123"
    assert pod.key == "prod/web"


@pytest.mark.parametrize(
    ("resources", "want_requests"),
    [
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, {"cpu": "1", "memory": "1Gi"}),
        ({"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}}, {"cpu": "100m", "memory": "1Gi"}),
        ({"requests": {"memory": "64Mi"}}, {"memory": "64Mi"}),
        ({"limits": {"example.com/foo": 2}}, {"example.com/foo": "2"}),
        ({}, {}),
    ],
)
def test_limit_without_request_sets_request(resources: dict[str, Any], want_requests: dict[str, str]) -> None:
    pod = parse_pod(manifest(lambda m: c0(m).update(resources=resources)))
    got = pod.spec.containers[0].resources.requests
    assert got == {k: parse_quantity(v) for k, v in want_requests.items()}
    assert pod.spec.containers[0].limits == {
        k: parse_quantity(str(v)) for k, v in resources.get("limits", {}).items()
    }


def test_numbers_are_quantities() -> None:
    pod = parse_pod(manifest(lambda m: c0(m).update(resources={"limits": {"cpu": 0.5, "memory": 1048576}})))
    assert str(pod.spec.containers[0].limits["cpu"]) == "500m"
    assert pod.spec.containers[0].limits["memory"].value() == 1048576


def test_builtin_priority_class_sets_priority() -> None:
    pod = parse_pod(manifest(lambda m: m["spec"].update(priorityClassName="system-node-critical")))
    assert pod.spec.priority == 2000001000
    pod = parse_pod(manifest(lambda m: m["spec"].update(priorityClassName="system-cluster-critical")))
    assert pod.spec.priority == 2000000000
    pod = parse_pod(manifest(lambda m: m["spec"].update(priorityClassName="batch", priority=7)))
    assert pod.spec.priority == 7


def test_server_fields_and_status_are_dropped() -> None:
    def edit(m: dict[str, Any]) -> None:
        m["metadata"].update(resourceVersion="12", generation=3, managedFields=[{}], selfLink="/x")
        m["status"] = {"phase": "Running"}

    assert parse_pod(manifest(edit)).to_dict()["metadata"].keys() == {"name", "namespace", "uid"}


def test_pod_is_frozen() -> None:
    pod = parse_pod(manifest())
    with pytest.raises(pydantic.ValidationError):
        pod.metadata.name = "other"  # type: ignore[misc]


FULL: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1.prod",
        "namespace": "prod",
        "uid": "0b6f6a1e-5c39-4b39-9d1e-2b7f5c1e9a10",
        "labels": {"app": "web", "example.com/tier": "front"},
        "annotations": {"kubernetes.io/config.source": "file", "note": "anything at all"},
        "creationTimestamp": "2024-05-01T12:00:00Z",
    },
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "nginx:1.25",
                "imagePullPolicy": "IfNotPresent",
                "command": ["/usr/bin/python3", "-m", "http.server"],
                "args": ["8080"],
                "env": [{"name": "A", "value": "1"}, {"name": "EMPTY"}],
                "workingDir": "/srv",
                "resources": {
                    "requests": {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                    "limits": {"cpu": "1", "memory": "128Mi", "hugepages-2Mi": "4Mi", "example.com/foo": "1"},
                },
                "ports": [{"containerPort": 8080}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "livenessProbe": {"httpGet": {"path": "/", "port": 8080}},
                "readinessProbe": {"exec": {"command": ["true"]}},
            },
            {"name": "side", "command": ["sleep", "infinity"]},
        ],
        "restartPolicy": "OnFailure",
        "priority": 100,
        "priorityClassName": "high",
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "nodeName": "node-1",
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}


@pytest.mark.parametrize("source", [BASE, FULL], ids=["minimal", "full"])
def test_round_trip(source: dict[str, Any]) -> None:
    pod = parse_pod(copy.deepcopy(source))
    again = parse_pod(pod.to_dict())
    assert again == pod
    assert again.to_dict() == pod.to_dict()


def test_to_dict_is_kubernetes_shaped() -> None:
    d = parse_pod(copy.deepcopy(FULL)).to_dict()
    main = d["spec"]["containers"][0]
    assert main["resources"]["requests"] == {
        "cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi", "hugepages-2Mi": "4Mi", "example.com/foo": "1",
    }
    assert main["resources"]["limits"]["cpu"] == "1"
    assert main["workingDir"] == "/srv"
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "EMPTY", "value": ""}]
    assert main["livenessProbe"] == {"httpGet": {"path": "/", "port": 8080}}
    assert d["spec"]["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000}
    assert d["spec"]["tolerations"][1] == {"operator": "Exists"}
    assert d["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert d["metadata"]["creationTimestamp"] == "2024-05-01T12:00:00Z"
    side = d["spec"]["containers"][1]
    assert side == {"name": "side", "command": ["sleep", "infinity"]}  # no None, no empties
    assert [c["name"] for c in d["spec"]["containers"]] == ["main", "side"]


def test_creation_timestamp_from_yaml_datetime() -> None:
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    pod = parse_pod(manifest(lambda m: m["metadata"].update(creationTimestamp=when)))
    assert pod.metadata.creation_timestamp == when
    assert pod.to_dict()["metadata"]["creationTimestamp"] == "2024-05-01T12:00:00Z"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Edit helper: `_set("spec.containers.0.name", "x")`; value DELETE removes the key."""

    def edit(m: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = m
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return edit


DELETE = object()
TWO = [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}]


def _res(**kw: Any) -> Callable[[dict[str, Any]], None]:
    return _set("spec.containers.0.resources", kw)


ERROR_CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("duplicate-container", _set("spec.containers", TWO), 'spec.containers[1].name: Duplicate value: "a"'),
    ("name-upper", _set("metadata.name", "Web"), 'metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain'),
    ("name-dotdot", _set("metadata.name", "a..b"), 'metadata.name: Invalid value: "a..b"'),
    ("name-slash", _set("metadata.name", "../etc"), 'metadata.name: Invalid value: "../etc"'),
    ("name-nul", _set("metadata.name", "a\x00"), 'metadata.name: Invalid value: "a\\u0000"'),
    ("name-missing", _set("metadata.name", DELETE), "metadata.name: Required value"),
    ("name-int", _set("metadata.name", 5), "metadata.name: Invalid value: 5: must be a valid string"),
    ("namespace-dots", _set("metadata.namespace", "a.b"), 'metadata.namespace: Invalid value: "a.b": must not contain dots'),
    ("uid-path", _set("metadata.uid", "../x"), 'metadata.uid: Invalid value: "../x": a pod uid must consist'),
    ("container-name", _set("spec.containers.0.name", "Main"), 'spec.containers[0].name: Invalid value: "Main": a lowercase RFC 1123 label'),
    ("api-version", _set("apiVersion", "v2"), 'apiVersion: Unsupported value: "v2": supported values: "v1"'),
    ("api-version-missing", _set("apiVersion", DELETE), "apiVersion: Required value"),
    ("kind", _set("kind", "Deployment"), 'kind: Unsupported value: "Deployment": supported values: "Pod"'),
    ("restart-policy", _set("spec.restartPolicy", "Sometimes"),
     'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"'),
    ("typo-in-container", _set("spec.containers.0.resoruces", {}), 'spec.containers[0].resoruces: unknown field "resoruces"'),
    ("typo-in-spec", _set("spec.restartPolicyy", "Never"), 'spec.restartPolicyy: unknown field "restartPolicyy"'),
    ("snake-case-is-unknown", _set("spec.restart_policy", "Never"), 'spec.restart_policy: unknown field "restart_policy"'),
    ("unsupported-spec-field", _set("spec.hostNetwork", True), 'spec.hostNetwork: unknown field "hostNetwork"'),
    ("pull-secret-only-name", _set("spec.imagePullSecrets", [{"name": "s", "key": "k"}]),
     'spec.imagePullSecrets[0].key: unknown field "key"'),
    ("typo-top-level", _set("metdata", {}), 'metdata: unknown field "metdata"'),
    ("typo-in-metadata", _set("metadata.lables", {"a": "b"}), 'metadata.lables: unknown field "lables"'),
    ("typo-in-resources", _res(limit={"cpu": "1"}), 'spec.containers[0].resources.limit: unknown field "limit"'),
    ("command-missing", _set("spec.containers.0.command", DELETE), "spec.containers[0].command: Required value"),
    ("command-empty", _set("spec.containers.0.command", []), "spec.containers[0].command: Required value"),
    ("command-empty-image", _set("spec.containers.0", {"name": "a", "image": ""}),
     "spec.containers[0].command: Required value"),
    ("command-nul", _set("spec.containers.0.command", ["a\x00b"]), "spec.containers[0].command[0]: Invalid value"),
    ("no-containers", _set("spec.containers", []), "spec.containers: Required value"),
    ("containers-missing", _set("spec.containers", DELETE), "spec.containers: Required value"),
    ("request-over-limit", _res(requests={"memory": "2Gi"}, limits={"memory": "1Gi"}),
     "spec.containers[0].resources.limits.memory: must be greater than or equal to memory request"),
    ("negative-request", _res(requests={"cpu": "-100m"}),
     'spec.containers[0].resources.requests.cpu: Invalid value: "-100m": must be greater than or equal to 0'),
    ("negative-limit", _res(limits={"memory": "-1"}),
     'spec.containers[0].resources.limits.memory: Invalid value: "-1": must be greater than or equal to 0'),
    ("bad-quantity", _res(limits={"memory": "1mi"}), "spec.containers[0].resources.limits.memory: invalid quantity '1mi'"),
    ("bad-resource-name", _res(limits={"gpu": "1"}),
     'spec.containers[0].resources.limits.gpu: Invalid value: "gpu": must be a standard resource for containers'),
    ("extended-fraction", _res(limits={"example.com/foo": "500m"}),
     'spec.containers[0].resources.limits.example.com/foo: Invalid value: "500m": must be an integer'),
    ("extended-request-ne-limit", _res(requests={"example.com/foo": "1"}, limits={"example.com/foo": "2"}),
     'spec.containers[0].resources.requests.example.com/foo: Invalid value: "1": must be equal to example.com/foo limit of 2'),
    ("extended-no-limit", _res(requests={"example.com/foo": "1"}),
     "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"),
    ("hugepages-alone", _res(limits={"hugepages-2Mi": "4Mi"}), "spec.containers[0].resources: Forbidden: HugePages require cpu or memory"),
    ("hugepages-bad-size", _res(limits={"hugepages-x": "4Mi", "memory": "1Gi"}), 'resources.limits.hugepages-x: Invalid value: "hugepages-x"'),
    ("grace-negative", _set("spec.terminationGracePeriodSeconds", -1),
     "spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0"),
    ("grace-string", _set("spec.terminationGracePeriodSeconds", "30"), "spec.terminationGracePeriodSeconds: Invalid value: \"30\": must be a valid integer"),
    ("priority-bool", _set("spec.priority", True), "spec.priority: Invalid value: True: must be a valid integer"),
    ("priority-range", _set("spec.priority", 2**31), "spec.priority: Invalid value: 2147483648"),
    ("priority-conflict", lambda m: m["spec"].update(priorityClassName="system-node-critical", priority=5),
     "spec.priority: Invalid value: 5: must be 2000001000 (or omitted)"),
    ("run-as-user", _set("spec.securityContext", {"runAsUser": -1}), "spec.securityContext.runAsUser: Invalid value: -1"),
    ("security-typo", _set("spec.securityContext", {"runAsUsr": 1}), 'spec.securityContext.runAsUsr: unknown field "runAsUsr"'),
    ("toleration-operator", _set("spec.tolerations", [{"key": "k", "operator": "In"}]),
     'spec.tolerations[0].operator: Unsupported value: "In": supported values: "Exists", "Equal"'),
    ("toleration-effect", _set("spec.tolerations", [{"key": "k", "effect": "Evict"}]),
     'spec.tolerations[0].effect: Unsupported value: "Evict"'),
    ("toleration-empty-key", _set("spec.tolerations", [{"operator": "Equal", "value": "v"}]),
     "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty"),
    ("toleration-seconds", _set("spec.tolerations", [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
     "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute'"),
    ("toleration-exists-value", _set("spec.tolerations", [{"key": "k", "operator": "Exists", "value": "v"}]),
     "spec.tolerations[0].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'"),
    ("label-key", _set("metadata.labels", {"bad key": "v"}), 'metadata.labels: Invalid value: "bad key": name part must consist of'),
    ("label-value", _set("metadata.labels", {"app": "a b"}), 'metadata.labels.app: Invalid value: "a b": a valid label must be'),
    ("label-value-int", _set("metadata.labels", {"app": 1}), "metadata.labels.app: Invalid value: 1: must be a valid string"),
    ("annotation-key", _set("metadata.annotations", {"a/b/c": "v"}), 'metadata.annotations: Invalid value: "a/b/c"'),
    ("node-selector", _set("spec.nodeSelector", {"disk": "fast ssd"}), 'spec.nodeSelector.disk: Invalid value: "fast ssd"'),
    ("node-name", _set("spec.nodeName", "Node_1"), 'spec.nodeName: Invalid value: "Node_1"'),
    ("priority-class-name", _set("spec.priorityClassName", "High"), 'spec.priorityClassName: Invalid value: "High"'),
    ("env-name", _set("spec.containers.0.env", [{"name": "A=B", "value": "x"}]),
     'spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name'),
    ("env-value-from", _set("spec.containers.0.env", [{"name": "A", "valueFrom": {}}]),
     'spec.containers[0].env[0].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`'),
    ("env-value-int", _set("spec.containers.0.env", [{"name": "PORT", "value": 8080}]),
     "spec.containers[0].env[0].value: Invalid value: 8080: must be a valid string"),
]


@pytest.mark.parametrize(("edit", "expected"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_errors_name_the_field(edit: Callable[[dict[str, Any]], None], expected: str) -> None:
    errors = errors_of(manifest(edit))
    assert any(expected in e for e in errors), errors


def test_all_errors_are_reported_at_once() -> None:
    def edit(m: dict[str, Any]) -> None:
        m["metadata"]["name"] = "Bad"
        m["spec"]["restartPolicy"] = "Sometimes"
        c0(m)["resoruces"] = {}

    errors = errors_of(manifest(edit))
    assert [e.split(":")[0] for e in errors] == ["metadata.name", "spec.containers[0].resoruces", "spec.restartPolicy"]


def test_error_paths_are_exposed() -> None:
    with pytest.raises(ValidationErrors) as exc:
        parse_pod(manifest(_set("spec.containers", TWO)))
    (err,) = exc.value.errors
    assert err.path == "spec.containers[1].name"
    assert err.message == 'Duplicate value: "a"'


def test_request_over_limit_not_reported_for_valid_pod() -> None:
    pod = parse_pod(manifest(_res(requests={"memory": "1Gi"}, limits={"memory": "1024Mi"})))
    assert pod.spec.containers[0].requests["memory"] == pod.spec.containers[0].limits["memory"]


@pytest.mark.parametrize("bad", [None, [], "pod", 3])
def test_non_mapping_manifest(bad: Any) -> None:
    assert errors_of(bad)


def test_model_can_be_built_directly_by_field_name() -> None:
    pod = Pod.model_validate(
        {"api_version": "v1", "kind": "Pod", "metadata": {"name": "x"},
         "spec": {"containers": [{"name": "a", "command": ["true"], "working_dir": "/"}]}}
    )
    assert pod.spec.containers[0].working_dir == "/"
