"""pods/resize on the server (KEP-1287, 1.35): the cases of upstream's TestValidatePodResize
(pkg/apis/core/validation/validation_test.go) through the pod strategy, what the subresource keeps
of a request (dropNonResizeUpdates), and the agent's side as pure functions: the resize patch a
server pod's new resources make, and observedGeneration on the status it reports."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.agent.cluster_client.podsource import local_manifest, resize_patch
from nodeagent.agent.cluster_client.podstatus import status_patch, with_generation
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.kinds.pods import PodStrategy, default_pod_spec
from nodeagent.core.model import parse_pod
from nodeagent.core.wellknown import CONFIG_MIRROR


def res(req: dict[str, str] | None = None, lim: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req:
        out["requests"] = req
    if lim:
        out["limits"] = lim
    return out


def pod(*containers: dict[str, Any], qos: str | None = None, init: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    cs = [{"name": f"c{i}", "command": ["sleep", "1"], "resources": r} for i, r in enumerate(containers)]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": "p", "namespace": "default", "uid": "u1", "generation": 1},
                            "spec": {"containers": cs, **spec}, "status": {"phase": "Running"}}
    if init:
        body["spec"]["initContainers"] = init
    default_pod_spec(body["spec"])
    if qos:
        body["status"]["qosClass"] = qos
    else:
        PodStrategy().default(body)
    return body


G = res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "100m", "memory": "64Mi"})
B = res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"})


def resized(old: dict[str, Any], *resources: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(old)
    for c, r in zip(new["spec"]["containers"], resources, strict=False):
        c["resources"] = r
    return new


def messages(old: dict[str, Any], new: dict[str, Any]) -> str:
    try:
        PodStrategy().prepare_for_subresource_update("resize", new, old)
    except errors.StatusError as e:
        assert e.code == 422
        return str(e)
    return ""


CASES: list[tuple[str, dict[str, Any], Any, str]] = [
    ("cpu limit change", pod(B), (res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "300m", "memory": "128Mi"}),), ""),
    ("memory limit change", pod(B), (res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "1Gi"}),), ""),
    ("cpu request change", pod(B), (res({"cpu": "150m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     ""),
    ("storage limit change", pod(B),
     (res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "1Gi"}),),
     "spec: Forbidden: only cpu and memory resources are mutable"),
    ("storage request change", pod(res({"cpu": "100m", "ephemeral-storage": "1Gi"})),
     (res({"cpu": "100m", "ephemeral-storage": "2Gi"}),),
     "spec: Forbidden: only cpu and memory resources are mutable"),
    ("Pod QoS unchanged, guaranteed -> guaranteed", pod(G),
     (res({"cpu": "200m", "memory": "128Mi"}, {"cpu": "200m", "memory": "128Mi"}),), ""),
    ("Pod QoS unchanged, burstable -> burstable", pod(B),
     (res({"cpu": "50m", "memory": "32Mi"}, {"cpu": "100m", "memory": "64Mi"}),), ""),
    ("Pod QoS change, guaranteed -> burstable", pod(G),
     (res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"}),),
     'spec: Invalid value: "Guaranteed": Pod QOS Class may not change as a result of resizing'),
    ("Pod QoS change, burstable -> guaranteed", pod(B),
     (res({"cpu": "200m", "memory": "128Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     'spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of resizing'),
    ("Pod QoS change, besteffort -> burstable", pod(res()), (res({"cpu": "100m"}),),
     'spec: Invalid value: "BestEffort": Pod QOS Class may not change as a result of resizing'),
    ("Pod QoS change, burstable -> besteffort", pod(res({"cpu": "100m"})), (res(),),
     "resource requests cannot be removed"),
    ("resource requests removed", pod(B), (res({"cpu": "100m"}, {"cpu": "200m", "memory": "128Mi"}),),
     "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"),
    ("resource limits removed", pod(B), (res({"cpu": "100m", "memory": "64Mi"}, {"memory": "128Mi"}),),
     "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed"),
    ("request above the limit", pod(B), (res({"cpu": "500m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     "spec.containers[0].resources"),
    ("static pod", pod(B, qos="Burstable"), (res({"cpu": "150m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     "Forbidden: static pods cannot be resized"),
    ("windows pod", pod(B, os={"name": "windows"}),
     (res({"cpu": "150m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     "Forbidden: windows pods cannot be resized"),
    ("pod-level resources", pod(B, resources={"limits": {"cpu": "1"}}),
     (res({"cpu": "150m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}),),
     "Forbidden: pods with pod-level resources cannot be resized"),
]
CASES[14][1]["metadata"]["annotations"] = {CONFIG_MIRROR: "x"}


@pytest.mark.parametrize(("name", "old", "resources", "want"), CASES, ids=[c[0] for c in CASES])
def test_validate_pod_resize(name: str, old: dict[str, Any], resources: Any, want: str) -> None:
    got = messages(old, resized(old, *resources))
    if want:
        assert want in got, got
    else:
        assert got == "", got


def test_containers_renamed_reordered_added() -> None:
    old = pod(B, B)
    new = copy.deepcopy(old)
    new["spec"]["containers"].reverse()
    assert messages(old, new).count("may not be renamed or reordered on resize") == 2
    assert "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize" \
        in messages(old, new)
    new = copy.deepcopy(old)
    new["spec"]["containers"].append({"name": "c9", "command": ["x"]})
    assert "spec.containers: Forbidden: containers may not be added or removed on resize" in messages(old, new)


def test_init_containers() -> None:
    init = [{"name": "i", "command": ["true"], "resources": res({"cpu": "10m"})},
            {"name": "side", "command": ["sleep", "9"], "restartPolicy": "Always", "resources": res({"cpu": "10m"})}]
    old = pod(B, init=init)
    new = copy.deepcopy(old)
    new["spec"]["initContainers"][1]["resources"] = res({"cpu": "20m"})
    assert messages(old, new) == ""
    new["spec"]["initContainers"][0]["resources"] = res({"cpu": "20m"})
    assert "spec.initContainers[0].resources: Forbidden: resources for non-sidecar init containers are immutable" \
        in messages(old, new)


def test_only_resources_and_resize_policy_are_kept() -> None:
    """dropNonResizeUpdates: the image, labels and status of the request are ignored; resizePolicy
    changes; the generation is the store's (bumped there)."""
    old = pod(B)
    new = resized(old, res({"cpu": "150m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}))
    c = new["spec"]["containers"][0]
    c["image"], c["command"] = "evil", ["rm", "-rf"]
    c["resizePolicy"] = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    new["metadata"]["labels"] = {"a": "b"}
    new["spec"]["nodeName"] = "elsewhere"
    new["status"] = {"phase": "Failed"}
    out = PodStrategy().prepare_for_subresource_update("resize", new, old)
    oc = out["spec"]["containers"][0]
    assert oc["command"] == ["sleep", "1"] and "image" not in oc
    assert oc["resources"]["requests"]["cpu"] == "150m"
    assert oc["resizePolicy"] == [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    assert "labels" not in out["metadata"] and "nodeName" not in out["spec"] and out["status"] == old["status"]


def test_a_bad_resize_policy_is_refused() -> None:
    old = pod(B)
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["resizePolicy"] = [{"resourceName": "memory", "restartPolicy": "Sometimes"}]
    assert "resizePolicy" in messages(old, new)


def test_restart_container_with_restart_policy_never() -> None:
    """validateResizePolicy: RestartContainer needs a pod that restarts containers."""
    old = pod(B, restartPolicy="Never")
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
    assert ("spec.containers[0].resizePolicy: Invalid value: \"RestartContainer\": must be 'NotRequired' when "
            "`restartPolicy` is 'Never'") in messages(old, new)
    new["spec"]["containers"][0]["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    assert messages(old, new) == ""


def test_resize_patch_from_the_server_pod() -> None:
    server = pod(B)
    server["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    desired = parse_pod(local_manifest(server))
    assert resize_patch(server, desired) is None
    server["spec"]["containers"][0]["resources"] = res({"cpu": "150m", "memory": "64Mi"},
                                                      {"cpu": "1", "memory": "128Mi"})
    server["spec"]["containers"][0]["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    patch = resize_patch(server, desired)
    assert patch == {"spec": {"containers": [{"name": "c0", "resources": server["spec"]["containers"][0]["resources"],
                                              "resizePolicy": [{"resourceName": "cpu",
                                                                "restartPolicy": "NotRequired"}]}]}}
    same = copy.deepcopy(server)
    same["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1000m"  # equal by value: nothing to do
    assert resize_patch(same, parse_pod(local_manifest(server))) is None


def test_observed_generation_on_status_and_resize_conditions() -> None:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                                 {"type": "PodResizePending", "status": "True", "reason": "Deferred"}]}
    out = with_generation(status, 3)
    assert out["observedGeneration"] == 3
    assert out["conditions"][0] == {"type": "Ready", "status": "True"}
    assert out["conditions"][1]["observedGeneration"] == 3 and out["conditions"][1]["reason"] == "Deferred"
    assert with_generation(status, None) is status


def test_a_resize_condition_no_longer_reported_is_removed() -> None:
    """The resize conditions are the agent's alone: once it stops reporting one, the server's goes
    (other types it does not report, such as PodScheduled, stay)."""
    current = {"conditions": [{"type": "PodScheduled", "status": "True"},
                              {"type": "PodResizePending", "status": "True", "reason": "Deferred"}]}
    ops = status_patch("u1", {"conditions": [{"type": "Ready", "status": "True"}]}, current)
    conditions = next(op["value"] for op in ops if op["path"] == "/status/conditions")
    assert [c["type"] for c in conditions] == ["PodScheduled", "Ready"]
