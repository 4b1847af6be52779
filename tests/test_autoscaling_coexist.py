"""HPA on CPU and VPA on memory: the ownership rule, and a joint simulation where both settle."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.autoscaling import together
from nodeagent.cluster.autoscaling.coexist import effective_spec, owned_by_hpa, resolve, same_target, without_taken
from nodeagent.cluster.autoscaling.hpa.spec import parse_hpa_spec
from nodeagent.cluster.autoscaling.vpa.spec import parse_vpa_spec

REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
HOUR = 3600.0


def hpa(*metrics: dict[str, Any], ref: dict[str, str] = REF) -> Any:
    return parse_hpa_spec({"scaleTargetRef": ref, "maxReplicas": 10, "metrics": list(metrics)})


def cpu() -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}


def vpa(*policies: dict[str, Any], ref: dict[str, str] = REF) -> Any:
    return parse_vpa_spec({"targetRef": ref, "updatePolicy": {"updateMode": "Auto"},
                           "resourcePolicy": {"containerPolicies": list(policies)}})


def test_what_an_hpa_owns() -> None:
    qps = {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
    assert owned_by_hpa(hpa(cpu(), qps)) == {"cpu": None}
    per_container = {"type": "ContainerResource", "containerResource": {"name": "memory", "container": "app",
                                                                        "target": {"type": "AverageValue", "averageValue": "1Gi"}}}
    assert owned_by_hpa(hpa(per_container)) == {"memory": frozenset({"app"})}
    assert owned_by_hpa(hpa(qps)) == {}


def test_targets_match_on_kind_name_and_group() -> None:
    assert same_target(hpa(cpu()), vpa())
    assert same_target(hpa(cpu(), ref={"apiVersion": "apps/v1beta2", "kind": "Deployment", "name": "web"}), vpa())
    assert not same_target(hpa(cpu(), ref={**REF, "name": "api"}), vpa())
    assert not same_target(hpa(cpu(), ref={**REF, "kind": "StatefulSet"}), vpa())


def test_hpa_on_cpu_vpa_on_both_keeps_memory_for_the_vpa() -> None:
    r = resolve(vpa(), "web-vpa", [("shop/web", hpa(cpu()))], ["app", "log"])
    assert r.controlled == {"app": ("memory",), "log": ("memory",)}
    assert r.taken == {"app": ("cpu",), "log": ("cpu",)}
    assert r.warnings[0] == ("VerticalPodAutoscaler web-vpa and HorizontalPodAutoscaler shop/web both scale cpu of "
                             "container app: the HPA owns it, the VPA leaves it alone")
    assert r.condition == {"type": "ConfigUnsupported", "status": "True", "reason": "HorizontalPodAutoscalerOwnsResource",
                           "message": "resources scaled by a HorizontalPodAutoscaler are not controlled (app: cpu; log: cpu)"}
    eff = effective_spec(vpa(), r)
    assert eff.controlled_resources("app") == ("memory",) and eff.controlled_resources("log") == ("memory",)
    assert r.by_hpa == {"shop/web": r.warnings}
    made_before = {"containerRecommendations": [
        {"containerName": c, "target": {"cpu": "500m", "memory": "1Gi"}, "lowerBound": {"cpu": "400m"}}
        for c in ("app", "other")]}
    assert without_taken(made_before, r) == {"containerRecommendations": [
        {"containerName": "app", "target": {"memory": "1Gi"}, "lowerBound": {}},
        {"containerName": "other", "target": {"cpu": "500m", "memory": "1Gi"}, "lowerBound": {"cpu": "400m"}}]}
    assert without_taken(made_before, resolve(vpa(), "v", [], ["app"])) is made_before


def test_the_article_setup_has_nothing_to_resolve() -> None:
    r = resolve(vpa({"containerName": "*", "controlledResources": ["memory"]}), "web-vpa", [("shop/web", hpa(cpu()))], ["app"])
    assert r.controlled == {"app": ("memory",)} and r.taken == {} and r.warnings == () and r.condition is None


def test_a_container_resource_metric_takes_one_container_only() -> None:
    per_container = {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                                                                        "target": {"type": "Utilization", "averageUtilization": 60}}}
    r = resolve(vpa(), "v", [("shop/web", hpa(per_container))], ["app", "log"])
    assert r.controlled == {"app": ("memory",), "log": ("cpu", "memory")}
    eff = effective_spec(vpa({"containerName": "*", "maxAllowed": {"memory": "1Gi"}}), r)
    assert eff.controlled_resources("app") == ("memory",)
    assert str(eff.policy_for("app").max_allowed["memory"]) == "1Gi"  # type: ignore[union-attr]  # the default's caps kept


def test_other_workloads_and_off_containers_are_untouched() -> None:
    r = resolve(vpa({"containerName": "log", "mode": "Off"}), "v", [("shop/api", hpa(cpu(), ref={**REF, "name": "api"}))],
                ["app", "log"])
    assert r.controlled == {"app": ("cpu", "memory"), "log": ()} and r.taken == {}


PHASES = together.Phases(((0, 3.0), (2 * HOUR, 8.0), (4 * HOUR, 4.0)))


@pytest.fixture(scope="module")
def settled() -> together.Result:
    return together.run(PHASES, 6.0, seed=1)


def test_with_the_rule_replicas_follow_the_load_and_settle(settled: together.Result) -> None:
    need = {0: 6, 2: 16, 4: 8}  # cores at 50% of 1-core requests
    for start, want in need.items():
        end = start + 2
        settled_at = int((end * HOUR - 1) / together.STEP)
        assert abs(settled.replicas[settled_at] - want) <= 1, start
        reps, mems = settled.changes_between((start + 1) * HOUR, end * HOUR)  # the second hour of each phase
        assert reps == 0 and mems == 0, start  # nothing moves once settled
    assert set(settled.cpu_requests) == {1000}  # the VPA never touched CPU
    assert settled.warnings  # the configuration was flagged


def test_with_the_rule_memory_requests_cover_the_working_set(settled: together.Result) -> None:
    # per pod: 200 MiB + 400 MiB per core served, at 0.5 core a pod: 400 MiB
    end = settled.memory_requests[-1]
    assert 400 * 2**20 <= end <= 2 * 400 * 2**20
    assert settled.resizes > 0 and settled.evictions == 0  # in place, no restarts


def test_without_the_rule_they_fight() -> None:
    fight = together.run(PHASES, 6.0, seed=1, ignore_ownership=True)
    # the VPA shrinks CPU requests, the HPA sees higher utilization and adds pods: far more than the load needs
    assert max(fight.replicas) >= 2 * 16
    assert min(fight.cpu_requests) < 500
