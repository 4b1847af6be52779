"""Env resolution from the pod (downward API, ConfigMap/Secret keys, envFrom) as the kubelet's
makeEnvironmentVariables, with resourceFieldRef's divisor rounding (ceiling); pure, no I/O."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.core.downward import EnvResolutionError, EnvSources, NodeFacts, divide_ceil, resolve_env
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity

FACTS = NodeFacts(node_name="node-1", host_ips=("10.0.0.5", "fd00::5"), pod_ips=("10.0.0.5",),
                  allocatable={"cpu": parse_quantity("3500m"), "memory": parse_quantity("8Gi"),
                               "ephemeral-storage": parse_quantity("100Gi")})


def pod_with(env: list[dict[str, Any]] | None = None, env_from: list[dict[str, Any]] | None = None,
             resources: dict[str, Any] | None = None, **spec: Any) -> Any:
    c: dict[str, Any] = {"name": "app", "command": ["x"], "env": env or [], "envFrom": env_from or []}
    if resources:
        c["resources"] = resources
    m: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "dapi-test-pod-name", "namespace": "ns1", "uid": "u-1",
                                      "labels": {"app": "web", "tier": "front"},
                                      "annotations": {"example.com/note": "hi \"there\""}},
                         "spec": {"containers": [c], **copy.deepcopy(spec)}}
    return parse_pod(m)


def field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def resolve(pod: Any, sources: EnvSources | None = None) -> dict[str, str]:
    return resolve_env(pod, pod.spec.containers[0], FACTS, sources).as_dict()


def test_field_refs() -> None:
    env = [field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"),
           field("POD_UID", "metadata.uid"), field("NODE", "spec.nodeName"), field("SA", "spec.serviceAccountName"),
           field("POD_IP", "status.podIP"), field("POD_IPS", "status.podIPs"), field("HOST_IP", "status.hostIP"),
           field("HOST_IPS", "status.hostIPs"), field("APP", "metadata.labels['app']"),
           field("MISSING", "metadata.labels['nope']"), field("NOTE", "metadata.annotations['example.com/note']")]
    got = resolve(pod_with(env, serviceAccountName="special"))
    assert got == {
        "POD_NAME": "dapi-test-pod-name", "POD_NAMESPACE": "ns1", "POD_UID": "u-1", "NODE": "node-1",
        "SA": "special", "POD_IP": "10.0.0.5", "POD_IPS": "10.0.0.5", "HOST_IP": "10.0.0.5",
        "HOST_IPS": "10.0.0.5,fd00::5", "APP": "web", "MISSING": "", "NOTE": 'hi "there"',
    }


def test_spec_node_name_wins_over_the_agent_name() -> None:
    assert resolve(pod_with([field("NODE", "spec.nodeName")], nodeName="scheduled-node")) == {"NODE": "scheduled-node"}


def test_service_account_unset_is_empty() -> None:
    assert resolve(pod_with([field("SA", "spec.serviceAccountName")])) == {"SA": ""}


def rf(name: str, resource: str, divisor: str | None = None, container: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    if container is not None:
        ref["containerName"] = container
    return {"name": name, "valueFrom": {"resourceFieldRef": ref}}


# upstream's TestExtractResourceValue cases plus the ceiling edges
@pytest.mark.parametrize(("resource", "divisor", "resources", "want"), [
    ("limits.cpu", None, {"limits": {"cpu": "9"}}, "9"),
    ("requests.cpu", None, {}, "0"),
    ("requests.cpu", None, {"requests": {"cpu": "8"}}, "8"),
    ("requests.cpu", "1m", {"requests": {"cpu": "100m"}}, "100"),
    ("requests.cpu", None, {"requests": {"cpu": "500m"}}, "1"),  # ceil(0.5)
    ("requests.cpu", None, {"requests": {"cpu": "1001m"}}, "2"),
    ("limits.memory", "1Mi", {"limits": {"memory": "1Gi"}}, "1024"),
    ("requests.memory", "1Mi", {"requests": {"memory": "1G"}}, "954"),  # 953.67 -> 954
    ("limits.memory", None, {"limits": {"memory": "100M"}}, "100000000"),
    ("limits.memory", "1k", {"limits": {"memory": "1001"}}, "2"),
    ("limits.memory", "0", {"limits": {"memory": "10"}}, "10"),  # zero divisor means 1
    ("limits.ephemeral-storage", "1Gi", {"limits": {"ephemeral-storage": "1.5Gi"}}, "2"),
    ("requests.ephemeral-storage", None, {}, "0"),
    ("limits.hugepages-2Mi", "1Mi", {"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}}, "4"),
    # no limit: the node's allocatable, as defaultPodLimitsForDownwardAPI
    ("limits.cpu", None, {}, "4"),  # ceil(3.5)
    ("limits.cpu", "1m", {}, "3500"),
    ("limits.memory", "1Gi", {"requests": {"memory": "1Gi"}}, "8"),
    ("limits.ephemeral-storage", "1Gi", {}, "100"),
])
def test_resource_field_refs(resource: str, divisor: str | None, resources: dict[str, Any], want: str) -> None:
    assert resolve(pod_with([rf("V", resource, divisor)], resources=resources)) == {"V": want}


def test_resource_field_ref_of_another_container() -> None:
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "init", "command": ["x"], "resources": {"limits": {"memory": "64Mi"}}}],
        "containers": [{"name": "app", "command": ["x"], "env": [rf("SIDE", "limits.cpu", "1m", "side"),
                                                                 rf("INIT", "requests.memory", "1Mi", "init")]},
                       {"name": "side", "command": ["y"], "resources": {"limits": {"cpu": "250m"}}}]}})
    assert resolve_env(pod, pod.spec.containers[0], FACTS).as_dict() == {"SIDE": "250", "INIT": "64"}
    bad = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "app", "command": ["x"], "env": [rf("X", "limits.cpu", None, "ghost")]}]}})
    with pytest.raises(EnvResolutionError, match="container ghost not found"):
        resolve_env(bad, bad.spec.containers[0], FACTS)


def test_divide_ceil() -> None:
    q = parse_quantity
    assert divide_ceil(q("1"), q("1m"), cpu=True) == 1000
    assert divide_ceil(q("1m"), q("1"), cpu=True) == 1
    assert divide_ceil(q("0"), q("1"), cpu=True) == 0
    assert divide_ceil(q("1Ki"), q("1k"), cpu=False) == 2  # 1.024 -> 2


def test_literal_values_expand_earlier_names_only() -> None:
    env = [{"name": "A", "value": "a"}, {"name": "B", "value": "$(A)-$(C)-$$(A)"}, {"name": "C", "value": "c"},
           field("D", "metadata.name"), {"name": "E", "value": "$(D)"}]
    assert resolve(pod_with(env)) == {"A": "a", "B": "a-$(C)-$(A)", "C": "c", "D": "dapi-test-pod-name",
                                      "E": "dapi-test-pod-name"}


def test_value_from_results_are_not_expanded() -> None:
    env = [{"name": "A", "value": "x"}, field("L", "metadata.annotations['example.com/note']")]
    pod = pod_with(env)
    pod = pod.model_copy(update={"metadata": pod.metadata.model_copy(update={"annotations": {"example.com/note": "$(A)"}})})
    assert resolve(pod)["L"] == "$(A)"


SOURCES = EnvSources(config_maps={"cfg": {"HOST": "db", "PORT": "5432", "bad key": "x", "1st": "y"}},
                     secrets={"sec": {"TOKEN": b"s3cret", "PORT": b"6000"}})


def test_env_from_prefix_order_and_override() -> None:
    env_from = [{"configMapRef": {"name": "cfg"}, "prefix": "DB_"}, {"configMapRef": {"name": "cfg"}},
                {"secretRef": {"name": "sec"}}]
    res = resolve_env(p := pod_with([{"name": "HOST", "value": "override-$(PORT)"}], env_from), p.spec.containers[0],
                      FACTS, SOURCES)
    got = res.as_dict()
    assert got["DB_HOST"] == "db" and got["DB_PORT"] == "5432" and got["DB_1st"] == "y"
    assert got["PORT"] == "6000"  # the later source (the secret) wins
    assert got["TOKEN"] == "s3cret"
    assert got["HOST"] == "override-6000"  # env overrides envFrom and expands against it
    assert "bad key" not in got and "1st" not in got and "DB_bad key" not in got
    assert [(s.kind, s.keys) for s in res.skipped] == [("configMap", ("DB_bad key",)), ("configMap", ("1st", "bad key"))]
    assert res.skipped[1].message == ("Keys [1st, bad key] from the EnvFrom configmap ns1/cfg were skipped since they "
                                      "are considered invalid environment variable names.")


def test_key_refs() -> None:
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
           {"name": "H", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "HOST"}}},
           {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": True}}},
           {"name": "OPT2", "valueFrom": {"secretKeyRef": {"name": "ghost", "key": "k", "optional": True}}}]
    assert resolve(pod_with(env), SOURCES) == {"T": "s3cret", "H": "db"}


@pytest.mark.parametrize(("env", "env_from", "message"), [
    ([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "ghost", "key": "k"}}}], None, 'configmap "ghost" not found'),
    ([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}], None, "couldn't find key k in ConfigMap ns1/cfg"),
    ([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "ghost", "key": "k"}}}], None, 'secret "ghost" not found'),
    ([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}}], None, "couldn't find key k in Secret ns1/sec"),
    (None, [{"configMapRef": {"name": "ghost"}}], 'configmap "ghost" not found'),
    (None, [{"secretRef": {"name": "ghost"}}], 'secret "ghost" not found'),
])
def test_missing_sources_are_config_errors(env: Any, env_from: Any, message: str) -> None:
    with pytest.raises(EnvResolutionError, match=message):
        resolve(pod_with(env, env_from), SOURCES)


def test_optional_env_from_missing_is_skipped() -> None:
    assert resolve(pod_with(None, [{"configMapRef": {"name": "ghost", "optional": True}}]), SOURCES) == {}
