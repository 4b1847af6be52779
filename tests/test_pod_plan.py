"""The pod plan (pods/plan.py): every value below admission, derived once from the manifest (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nodeagent.agent.cgroups.driver import CgroupSpec
from nodeagent.agent.pods.plan import PodPlan, plan_pod
from nodeagent.core.downward import NodeFacts
from nodeagent.core.errors import FieldError
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import parse_quantity

GI = 1 << 30
MI = 1 << 20


def plan(uid: str, *containers: dict[str, Any], clamp: Any = None, **spec: Any) -> PodPlan:
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"p-{uid}", "namespace": "team", "uid": uid},
                     "spec": {"containers": [{"name": f"c{i}", "command": ["sleep", "1"], **c}
                                             for i, c in enumerate(containers)], **spec}})
    kw = {"clamp_oom_score_adj": clamp} if clamp else {}
    return plan_pod(pod, state_dir="/var/lib/nodeagent", memory_capacity=4 * GI, **kw)


def res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}


@pytest.mark.parametrize(("containers", "qos", "path"), [
    ([res(limits={"cpu": "1", "memory": "64Mi"})], "Guaranteed", "kubepods/podg1"),
    ([res(requests={"memory": "1Gi"})], "Burstable", "kubepods/burstable/podg1"),
    ([{}], "BestEffort", "kubepods/besteffort/podg1"),
])
def test_the_cgroup_paths_follow_the_qos_class(containers: list[dict[str, Any]], qos: str, path: str) -> None:
    p = plan("g1", *containers)
    assert (p.qos, p.cgroup_path) == (qos, path)
    assert [c.cgroup_path for c in p.containers] == [f"{path}/c0"]


def test_requests_limits_and_cgroup_values_are_summed_once() -> None:
    p = plan("b1", res({"cpu": "100m", "memory": "10Mi"}, {"cpu": "1", "memory": "100Mi"}),
             res({"cpu": "400m"}, {"cpu": "1"}))
    assert (str(p.requests["cpu"]), str(p.requests["memory"])) == ("500m", "10Mi")
    assert p.cpu_request_milli == 500
    assert p.resources.limited_everywhere == {"cpu"}
    # every container limits cpu: pod quota; one has no memory limit: no pod memory.max
    assert p.cgroup_spec == CgroupSpec(cpu_shares=512, cpu_quota_us=200000)
    assert [c.cgroup_spec for c in p.containers] == [
        CgroupSpec(cpu_shares=102, cpu_quota_us=100000, memory_max=100 * MI),
        CgroupSpec(cpu_shares=409, cpu_quota_us=100000),
    ]


def test_each_container_gets_its_own_oom_score_adj_clamped_by_the_node() -> None:
    p = plan("b2", res({"memory": "2Gi"}), res({"memory": "1Gi"}))
    assert [c.config.oom_score_adj for c in p.containers] == [500, 750]
    floor = plan("b3", res({"memory": "2Gi"}), {}, clamp=lambda adj: max(adj, 600))
    assert [c.config.oom_score_adj for c in floor.containers] == [600, 999]  # no request: just below BestEffort
    critical = plan("c1", {}, priorityClassName="system-node-critical")
    assert critical.critical and not critical.static
    assert [c.config.oom_score_adj for c in critical.containers] == [-997]


def test_launch_specs_log_dirs_and_identity_are_planned() -> None:
    p = plan("u9", {"command": ["/bin/sh", "-c", "echo $(GREETING)"], "env": [{"name": "GREETING", "value": "hi"}],
                    "workingDir": "/tmp"}, restartPolicy="OnFailure", securityContext={"runAsUser": 1000})
    c = p.containers[0].config
    assert c.launch.argv == ("/bin/sh", "-c", "echo hi") and c.launch.working_dir == "/tmp"
    assert c.launch.run_as_user == 1000
    assert (c.restart_policy, c.pod_namespace, c.pod_name, c.pod_uid) == ("OnFailure", "team", "p-u9", "u9")
    assert p.log_dir == "/var/lib/nodeagent/pods/team_p-u9_u9"
    assert c.log_dir == "/var/lib/nodeagent/pods/team_p-u9_u9/c0"
    assert p.key == ("team", "p-u9") and p.container("c0") is p.containers[0] and p.container("x") is None


def test_a_static_pod_is_critical_and_planned_as_static() -> None:
    p = plan("s1", {}, priority=0)
    assert not p.static
    static = plan_pod(parse_pod({"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "web", "uid": "s2",
                                              "annotations": {"kubernetes.io/config.source": "file"}},
                                 "spec": {"containers": [{"name": "c", "command": ["x"]}]}}),
                      state_dir="/s", memory_capacity=GI)
    assert static.static and static.critical


def test_the_plan_is_immutable() -> None:
    p = plan("i1", res({"cpu": "1"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.qos = "Guaranteed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.requests["cpu"] = p.requests["cpu"]  # type: ignore[index]


def test_a_pod_that_cannot_be_planned_names_the_field() -> None:
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "uid": "w1"},
                     "spec": {"containers": [{"name": "c", "command": ["x"], "workingDir": "relative"}]}})
    with pytest.raises(FieldError, match="workingDir"):
        plan_pod(pod, state_dir="/s", memory_capacity=GI)
    with pytest.raises(ValueError, match="capacity"):
        plan_pod(pod.model_copy(update={"spec": pod.spec.model_copy(update={"containers": [
            pod.spec.containers[0].model_copy(update={"working_dir": None})]})}), state_dir="/s", memory_capacity=0)


# ---- init containers and the container's environment ----

FACTS = NodeFacts(node_name="node-a", host_ips=("10.0.0.5",), pod_ips=("10.0.0.5",),
                  allocatable={"cpu": parse_quantity("2"), "memory": parse_quantity("4Gi")})


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["/bin/sh", "-c", script], **extra}


def manifest(name: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": "u-" + name,
                         "labels": {"app": "web"}, "annotations": {"team": "blue"}},
            "spec": {"containers": containers, "initContainers": init or [], **spec}}


def test_the_plan_holds_init_containers_with_their_restart_policies_and_the_resolved_env() -> None:
    p = parse_pod(manifest("p", [sh("app", "true", env=[
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "GREETING", "value": "hi $(POD) $$(POD)"},
        {"name": "RAW", "value": "$(NOPE)"}],
        args=["$(GREETING)"], envFrom=[{"configMapRef": {"name": "absent", "optional": True}}],
        resources={"requests": {"memory": "1Gi"}})],
        init=[sh("setup", "true"), sh("proxy", "sleep 1", restartPolicy="Always")],
        restartPolicy="Never", serviceAccountName="robot"))
    plan = plan_pod(p, state_dir="/var/lib/nodeagent", memory_capacity=4 * GI, node=FACTS)
    assert [c.name for c in plan.init_containers] == ["setup", "proxy"]
    assert [c.name for c in plan.all_containers] == ["setup", "proxy", "app"]
    assert [(c.init, c.sidecar, c.config.restart_policy) for c in plan.all_containers] == [
        (True, False, "Never"), (True, True, "Always"), (False, False, "Never")]
    assert plan.init_containers[0].cgroup_path == f"kubepods/burstable/pod{p.metadata.uid}/setup"
    env = plan.containers[0].config.launch.env
    assert {k: env[k] for k in ("POD", "NS", "APP", "TEAM", "NODE", "IP", "HOST", "SA", "MEM", "GREETING", "RAW")} == {
        "POD": "p", "NS": "default", "APP": "web", "TEAM": "blue", "NODE": "node-a", "IP": "10.0.0.5",
        "HOST": "10.0.0.5", "SA": "robot", "MEM": "4096", "GREETING": "hi p $(POD)", "RAW": "$(NOPE)"}
    assert "PATH" in env and "HOME" in env  # the runtime's defaults
    assert plan.containers[0].config.launch.argv[-1] == "hi p $(POD)"  # expanded once, "$$" kept as "$"
    assert (plan.host_ips, plan.pod_ips) == (("10.0.0.5",), ("10.0.0.5",))
    # the sidecar is killed no earlier than the app container it serves (GetContainerOOMScoreAdjust)
    assert [c.config.oom_score_adj for c in plan.all_containers] == [999, 750, 750]


def test_a_container_whose_env_source_is_missing_cannot_be_configured() -> None:
    p = parse_pod(manifest("p", [sh("app", "true", envFrom=[{"configMapRef": {"name": "settings"}}]),
                                 sh("ok", "true")]))
    plan = plan_pod(p, state_dir="/s", memory_capacity=4 * GI, node=FACTS)
    assert plan.containers[0].config_error == 'configmap "settings" not found'
    assert plan.containers[1].config_error is None
