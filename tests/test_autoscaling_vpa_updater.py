"""The VPA updater's decisions: modes, update priority and threshold, min replicas, eviction tolerance,
PodDisruptionBudgets, and InPlaceOrRecreate with its fall-backs to eviction."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.autoscaling.vpa.spec import parse_vpa_spec
from nodeagent.cluster.autoscaling.vpa.updater import (
    EVICTED_MESSAGE,
    RESIZED_MESSAGE,
    Plan,
    apply_patch,
    plan,
    update_priority,
)
from nodeagent.core.timefmt import rfc3339

NOW = 1_700_100_000.0
OLD = NOW - 13 * 3600  # past the 12 h pod lifetime threshold
YOUNG = NOW - 3600
REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}


def vpa(mode: str = "Recreate", **update: Any) -> Any:
    return parse_vpa_spec({"targetRef": REF, "updatePolicy": {"updateMode": mode, **update}})


def rec(
    cpu: str = "500m",
    memory: str = "256Mi",
    lo: tuple[str, str] = ("400m", "200Mi"),
    hi: tuple[str, str] = ("800m", "512Mi"),
) -> dict[str, Any]:
    return {
        "containerRecommendations": [
            {
                "containerName": "app",
                "target": {"cpu": cpu, "memory": memory},
                "lowerBound": {"cpu": lo[0], "memory": lo[1]},
                "upperBound": {"cpu": hi[0], "memory": hi[1]},
            }
        ]
    }


def pod(
    name: str,
    cpu: str = "500m",
    memory: str = "256Mi",
    *,
    start: float = OLD,
    owner: str | None = "web-abc",
    phase: str = "Running",
    conditions: list[dict[str, Any]] | None = None,
    limits: dict[str, str] | None = None,
    oom_after: float | None = None,
    qos: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True}]
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    status: dict[str, Any] = {"phase": phase, "startTime": rfc3339(start), "conditions": conditions or []}
    if qos:
        status["qosClass"] = qos
    if oom_after is not None:
        status["containerStatuses"] = [
            {
                "name": "app",
                "lastState": {
                    "terminated": {
                        "reason": "OOMKilled",
                        "startedAt": rfc3339(NOW - 1000),
                        "finishedAt": rfc3339(NOW - 1000 + oom_after),
                    }
                },
            }
        ]
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "resources": resources}]}, "status": status}


def actions(p: Plan) -> dict[str, str]:
    return {d.pod: d.action for d in p.decisions}


@pytest.mark.parametrize("mode", ["Off", "Initial"])
def test_off_and_initial_never_touch_running_pods(mode: str) -> None:
    got = plan(vpa(mode), rec(cpu="4"), [pod("a", "100m"), pod("b", "100m")], NOW)
    assert set(actions(got).values()) == {"none"}
    assert got.decisions[0].reason == f"updateMode {mode} does not update running pods"


@pytest.mark.parametrize(
    ("case", "pods", "expected"),
    [
        (
            "within the range, young",
            [pod("a", "450m", start=YOUNG), pod("b", "450m", start=YOUNG)],
            {"a": "none", "b": "none"},
        ),
        ("within the range, old, 10% off", [pod("a", "450m"), pod("b", "450m")], {"a": "evict", "b": "none"}),
        (
            "within the range, old, under the threshold",
            [pod("a", "480m", "250Mi"), pod("b", "480m", "250Mi")],
            {"a": "none", "b": "none"},
        ),
        (
            "below the lower bound, young",
            [pod("a", "100m", start=YOUNG), pod("b", "500m")],
            {"a": "evict", "b": "none"},
        ),
        (
            "no request counts as outside",
            [pod("a", "500m"), {**pod("b"), "spec": {"containers": [{"name": "app"}]}}],
            {"a": "none", "b": "evict"},
        ),
        (
            "a bare pod is never evicted",
            [pod("a", "100m", owner=None), pod("b", "100m", owner=None)],
            {"a": "none", "b": "none"},
        ),
        ("too few replicas", [pod("a", "100m")], {"a": "none"}),
    ],
)
def test_recreate(case: str, pods: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert actions(plan(vpa(), rec(), pods, NOW)) == expected, case


def test_eviction_tolerance_keeps_half_the_replicas() -> None:
    pods = [pod(f"p{i}", "100m") for i in range(4)]
    got = plan(vpa(), rec(), pods, NOW, configured_replicas={"ReplicaSet/web-abc": 4})
    assert list(actions(got).values()).count("evict") == 2  # int(4 * 0.5)
    assert [d.reason for d in got.decisions if d.action == "evict"] == [f"{EVICTED_MESSAGE} (Recreate)"] * 2
    assert "eviction would take the group below its availability" in {d.reason for d in got.decisions}


def test_min_replicas_per_vpa_and_one_eviction_when_tolerance_rounds_down() -> None:
    pods = [pod("a", "100m")]
    assert actions(plan(vpa(minReplicas=1), rec(), pods, NOW)) == {"a": "evict"}  # tolerance 0, all replicas running
    two = [pod("a", "100m"), pod("b", "100m")]
    got = plan(vpa(), rec(), two, NOW, configured_replicas={"ReplicaSet/web-abc": 3})
    assert list(actions(got).values()) == ["none", "none"]  # 2 of 3 running: nothing may go


def test_pending_pods_can_always_be_evicted() -> None:
    pods = [pod("a", "100m", phase="Pending"), pod("b", "100m", phase="Pending")]
    assert actions(plan(vpa(), rec(), pods, NOW, configured_replicas={"ReplicaSet/web-abc": 2})) == {
        "a": "evict",
        "b": "evict",
    }


def test_disruption_budgets_are_honoured() -> None:
    pods = [pod(f"p{i}", "100m") for i in range(6)]
    got = plan(
        vpa(), rec(), pods, NOW, pdb_allowed={"web-pdb": 1}, pod_pdbs={p["metadata"]["name"]: ["web-pdb"] for p in pods}
    )
    evicted = [d for d in got.decisions if d.action == "evict"]
    assert len(evicted) == 1
    blocked = [
        d
        for d in got.decisions
        if d.reason.startswith("Cannot evict pod as it would violate the pod's disruption budget.")
    ]
    assert len(blocked) == 5  # the group would allow 3 (int(6 * 0.5)); the budget allows 1


def test_scale_ups_go_first_then_the_bigger_difference() -> None:
    pods = [pod("small-down", "900m", "512Mi"), pod("big-up", "100m"), pod("small-up", "350m")]
    got = plan(vpa(), rec(hi=("2", "1Gi")), pods, NOW, configured_replicas={"ReplicaSet/web-abc": 3})
    assert actions(got) == {"small-down": "none", "big-up": "evict", "small-up": "none"}  # one of three may go
    assert update_priority(pods[1], vpa(), rec()).scale_up
    assert not update_priority(pods[0], vpa(), rec(hi=("2", "1Gi"))).scale_up


def test_quick_oom_evicts_within_range() -> None:
    pods = [pod("a", "500m", "200Mi", start=YOUNG, oom_after=30), pod("b", start=YOUNG)]
    assert actions(plan(vpa(), rec(), pods, NOW)) == {"a": "evict", "b": "none"}
    slow = [pod("a", "500m", "200Mi", start=YOUNG, oom_after=3600), pod("b", start=YOUNG)]
    assert actions(plan(vpa(), rec(), slow, NOW)) == {"a": "none", "b": "none"}


def test_no_recommendation_no_action() -> None:
    assert set(actions(plan(vpa(), {}, [pod("a", "1m"), pod("b", "1m")], NOW)).values()) == {"none"}


# --- InPlaceOrRecreate ----------------------------------------------------------------------------


def pending(reason: str) -> list[dict[str, Any]]:
    return [{"type": "PodResizePending", "status": "True", "reason": reason, "message": "..."}]


def in_progress(reason: str = "", message: str = "") -> list[dict[str, Any]]:
    c = {"type": "PodResizeInProgress", "status": "True"}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return [c]


def test_in_place_resize_patch() -> None:
    pods = [pod("a", "100m", limits={"cpu": "200m"}), pod("b")]
    got = plan(vpa("InPlaceOrRecreate"), rec(), pods, NOW)
    d = got.decisions[0]
    assert (d.action, d.reason) == ("resize", RESIZED_MESSAGE)
    assert d.patch == (
        {"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "500m"},
        {"op": "add", "path": "/spec/containers/0/resources/requests/memory", "value": "256Mi"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "1"},
    )
    resized = apply_patch(pods[0], d.patch)
    assert resized["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"cpu": "1"},
    }
    assert got.in_place_attempts == {"a": NOW}


def test_in_place_falls_back_to_eviction_when_the_qos_class_would_change() -> None:
    # requests == limits (Guaranteed); RequestsOnly would make requests differ from limits: Burstable
    guaranteed = pod("a", "100m", "100Mi", limits={"cpu": "100m", "memory": "100Mi"}, qos="Guaranteed")
    s = parse_vpa_spec(
        {
            "targetRef": REF,
            "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
            "resourcePolicy": {"containerPolicies": [{"containerName": "*", "controlledValues": "RequestsOnly"}]},
        }
    )
    got = plan(s, rec(cpu="50m", lo=("40m", "50Mi")), [guaranteed, pod("b", "50m")], NOW)
    assert got.decisions[0].action == "evict"
    assert got.decisions[0].reason.endswith("(the resize would change the QoS class)")


@pytest.mark.parametrize(
    ("case", "conditions", "started", "expected"),
    [
        ("deferred for 4 min: wait", pending("Deferred"), NOW - 240, "none"),
        ("deferred for 6 min: evict", pending("Deferred"), NOW - 360, "evict"),
        ("infeasible: evict at once", pending("Infeasible"), NOW, "evict"),
        ("in progress for 30 min: wait", in_progress(), NOW - 1800, "none"),
        ("in progress for 61 min: evict", in_progress(), NOW - 3660, "evict"),
        ("in progress with an error: evict", in_progress("Error", "memory usage above the new limit"), NOW, "evict"),
    ],
)
def test_in_place_fall_backs(case: str, conditions: list[dict[str, Any]], started: float, expected: str) -> None:
    pods = [pod("a", "100m", conditions=conditions), pod("b"), pod("c")]
    got = plan(vpa("InPlaceOrRecreate"), rec(), pods, NOW, in_place_attempts={"a": started})
    assert got.decisions[0].action == expected, case
    if expected == "evict":
        assert "a" not in got.in_place_attempts


def test_in_place_respects_the_group_budget() -> None:
    pods = [pod(f"p{i}", "100m") for i in range(4)]
    got = plan(vpa("InPlaceOrRecreate"), rec(), pods, NOW)
    assert list(actions(got).values()).count("resize") == 2  # in-place counts against the tolerance too


def test_a_first_seen_resize_starts_its_clock_now() -> None:
    pods = [pod("a", "100m", conditions=pending("Deferred")), pod("b")]
    got = plan(vpa("InPlaceOrRecreate"), rec(), pods, NOW)
    assert got.decisions[0].action == "none" and got.in_place_attempts["a"] == NOW
    later = plan(vpa("InPlaceOrRecreate"), rec(), pods, NOW + 301, in_place_attempts=got.in_place_attempts)
    assert later.decisions[0].action == "evict"


def test_recreate_evicts_a_stalled_resize_only_when_the_group_allows() -> None:
    stuck = pod("a", "100m", conditions=pending("Infeasible"))
    assert actions(plan(vpa(), rec(), [stuck, pod("b")], NOW)) == {"a": "evict", "b": "none"}
    # three configured, two running: nothing may go, not even a stuck resize
    got = plan(vpa(), rec(), [stuck, pod("b")], NOW, configured_replicas={"ReplicaSet/web-abc": 3})
    assert actions(got)["a"] == "none" and got.decisions[0].reason == "in-place resize under way"
