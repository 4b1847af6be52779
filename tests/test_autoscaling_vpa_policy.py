"""VPA spec validation, resource policy on recommendations and pods, and the admission patch."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.autoscaling.vpa.admission import admit
from nodeagent.cluster.autoscaling.vpa.aggregate import AggregateContainerState
from nodeagent.cluster.autoscaling.vpa.policy import (
    pod_resources,
    proportional_limit,
    recommendation_status,
    recommended_states,
)
from nodeagent.cluster.autoscaling.vpa.recommender import Estimate
from nodeagent.cluster.autoscaling.vpa.spec import parse_vpa_spec
from nodeagent.cluster.autoscaling.vpa.updater import apply_patch
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.quantity import parse_quantity

REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
MI = 1024 * 1024


def spec(mode: str = "Recreate", *policies: dict[str, Any]) -> Any:
    return parse_vpa_spec(
        {
            "targetRef": REF,
            "updatePolicy": {"updateMode": mode},
            "resourcePolicy": {"containerPolicies": list(policies)},
        }
    )


def test_spec_defaults_and_policy_lookup() -> None:
    s = parse_vpa_spec({"targetRef": REF})
    assert s.update_mode == "Recreate" and s.container_policies == ()
    s = spec("Auto", {"containerName": "*", "controlledResources": ["memory"]}, {"containerName": "app", "mode": "Off"})
    assert s.policy_for("app").mode == "Off"  # type: ignore[union-attr]
    assert s.controlled_resources("sidecar") == ("memory",)  # the "*" policy
    assert s.controlled_values("sidecar") == "RequestsAndLimits"
    assert s.scaling_off("app") and not s.scaling_off("sidecar")


@pytest.mark.parametrize(
    ("raw", "errors"),
    [
        ({}, ["spec.targetRef: Required value: If you're using v1beta1 version of the API, please migrate to v1"]),
        (
            {"targetRef": REF, "updatePolicy": {}},
            ["spec.updatePolicy.updateMode: Required value: updateMode is required if UpdatePolicy is used"],
        ),
        (
            {"targetRef": REF, "updatePolicy": {"updateMode": "Sometimes"}},
            [
                'spec.updatePolicy.updateMode: Unsupported value: "Sometimes": supported values: "Off", "Initial", "Recreate", "InPlaceOrRecreate", "Auto", "InPlace"'
            ],
        ),
        (
            {"targetRef": REF, "updatePolicy": {"updateMode": "InPlace"}},
            [
                "spec.updatePolicy.updateMode: Forbidden: in order to use UpdateMode InPlace, you must enable feature gate InPlace in the admission-controller args"
            ],
        ),
        (
            {"targetRef": REF, "updatePolicy": {"updateMode": "Auto", "minReplicas": 0}},
            ["spec.updatePolicy.minReplicas: Invalid value: 0: minReplicas has to be positive"],
        ),
        (
            {"targetRef": REF, "resourcePolicy": {"containerPolicies": [{"mode": "Auto"}]}},
            ["spec.resourcePolicy.containerPolicies[0].containerName: Required value"],
        ),
        (
            {"targetRef": REF, "resourcePolicy": {"containerPolicies": [{"containerName": "a", "mode": "On"}]}},
            ['spec.resourcePolicy.containerPolicies[0].mode: Unsupported value: "On": supported values: "Auto", "Off"'],
        ),
        (
            {
                "targetRef": REF,
                "resourcePolicy": {
                    "containerPolicies": [
                        {"containerName": "a", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}
                    ]
                },
            },
            [
                'spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]: Invalid value: "1": max resource for cpu is lower than min of "2"'
            ],
        ),
        (
            {
                "targetRef": REF,
                "resourcePolicy": {
                    "containerPolicies": [{"containerName": "a", "mode": "Off", "controlledValues": "RequestsOnly"}]
                },
            },
            [
                "spec.resourcePolicy.containerPolicies[0].controlledValues: Forbidden: controlledValues shouldn't be specified if container scaling mode is off"
            ],
        ),
        (
            {
                "targetRef": REF,
                "resourcePolicy": {
                    "containerPolicies": [{"containerName": "a", "controlledResources": ["cpu", "gpu"]}]
                },
            },
            [
                'spec.resourcePolicy.containerPolicies[0].controlledResources[1]: Unsupported value: "gpu": supported values: "cpu", "memory"'
            ],
        ),
        (
            {
                "targetRef": REF,
                "resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"cpu": "1.0005"}}]},
            },
            [
                'spec.resourcePolicy.containerPolicies[0].minAllowed[cpu]: Invalid value: "1000500u": must be a whole number of milli CPUs'
            ],
        ),
    ],
)
def test_spec_validation_names_the_field(raw: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(ValidationErrors) as e:
        parse_vpa_spec(raw)
    assert [str(x) for x in e.value.errors] == errors


def test_off_containers_get_no_recommendation() -> None:
    s = spec("Auto", {"containerName": "log", "mode": "Off"})
    states = {"app": AggregateContainerState(), "log": AggregateContainerState()}
    assert set(recommended_states(states, s)) == {"app"}


def test_status_recommendation_caps_and_keeps_the_uncapped_target() -> None:
    s = spec("Auto", {"containerName": "app", "minAllowed": {"memory": "512Mi"}, "maxAllowed": {"cpu": "1"}})
    est = {
        "app": Estimate(
            {"cpu": 1500, "memory": 300 * MI}, {"cpu": 500, "memory": 200 * MI}, {"cpu": 3000, "memory": 600 * MI}
        ),
        "db": Estimate({"cpu": 100}, {"cpu": 50}, {"cpu": 200}),
    }
    got = recommendation_status(est, s)
    assert got == {
        "containerRecommendations": [
            {
                "containerName": "app",
                "target": {"cpu": "1", "memory": "512Mi"},
                "lowerBound": {"cpu": "500m", "memory": "512Mi"},
                "upperBound": {"cpu": "1", "memory": "600Mi"},
                "uncappedTarget": {"cpu": "1500m", "memory": "300Mi"},
            },
            {
                "containerName": "db",
                "target": {"cpu": "100m"},
                "lowerBound": {"cpu": "50m"},
                "upperBound": {"cpu": "200m"},
                "uncappedTarget": {"cpu": "100m"},
            },
        ]
    }
    capped = recommendation_status(est, spec(), global_max={"cpu": parse_quantity("150m")})
    assert capped["containerRecommendations"][1]["target"] == {"cpu": "100m"}
    assert capped["containerRecommendations"][0]["target"]["cpu"] == "150m"


@pytest.mark.parametrize(
    ("resource", "limit", "req", "rec", "expected"),
    [
        ("cpu", "2", "1", "1500m", "3"),  # ratio 2 kept
        ("cpu", "1", "1", "1500m", "1500m"),  # limit == request stays equal
        ("cpu", "1", None, "300m", "300m"),  # no request: the limit becomes the recommendation
        ("cpu", None, "1", "300m", None),  # no limit, no limit
        ("memory", "1Gi", "512Mi", "300Mi", "600Mi"),  # 2x, in the original limit's format
        ("memory", "1Gi", "512Mi", None, None),
    ],
)
def test_proportional_limit(
    resource: str, limit: str | None, req: str | None, rec: str | None, expected: str | None
) -> None:
    q = lambda v: None if v is None else parse_quantity(v)
    got, _ = proportional_limit(resource, q(limit), q(req), q(rec))
    assert (None if got is None else str(got)) == expected


def pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": list(containers)},
    }


RECOMMENDATION = {
    "containerRecommendations": [
        {
            "containerName": "app",
            "target": {"cpu": "500m", "memory": "300Mi"},
            "lowerBound": {"cpu": "400m", "memory": "250Mi"},
            "upperBound": {"cpu": "2", "memory": "1Gi"},
        }
    ]
}


def test_pod_resources_requests_and_limits() -> None:
    p = pod(
        {
            "name": "app",
            "resources": {"requests": {"cpu": "250m", "memory": "200Mi"}, "limits": {"cpu": "500m", "memory": "200Mi"}},
        },
        {"name": "log"},
    )
    got = pod_resources(p, spec(), RECOMMENDATION)
    assert got[1] is None
    assert got[0] is not None
    assert {k: str(v) for k, v in got[0].requests.items()} == {"cpu": "500m", "memory": "300Mi"}
    assert {k: str(v) for k, v in got[0].limits.items()} == {"cpu": "1", "memory": "300Mi"}  # ratio 2 / equal


def test_requests_only_keeps_limits_and_stays_under_them() -> None:
    p = pod({"name": "app", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "400m"}}})
    got = pod_resources(p, spec("Auto", {"containerName": "*", "controlledValues": "RequestsOnly"}), RECOMMENDATION)
    assert got[0] is not None and got[0].limits == {}
    assert str(got[0].requests["cpu"]) == "400m"  # capped to the container limit
    assert "cpu capped to container limit" in got[0].annotations


def test_admission_patch_for_a_new_pod() -> None:
    p = pod({"name": "app", "resources": {"limits": {"memory": "600Mi"}}}, {"name": "log"})
    memory_only = {"containerRecommendations": [{"containerName": "app", "target": {"memory": "300Mi"}}]}
    got = admit(p, "web-vpa", spec("Initial", {"containerName": "*", "controlledResources": ["memory"]}), memory_only)
    assert got.patch == (
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/vpaObservedContainers", "value": "app, log"},
        {"op": "add", "path": "/spec/containers/0/resources/requests", "value": {}},
        {"op": "add", "path": "/spec/containers/0/resources/requests/memory", "value": "300Mi"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/memory", "value": "300Mi"},
        {
            "op": "add",
            "path": "/metadata/annotations/vpaUpdates",
            "value": "Pod resources updated by web-vpa: container 0: cpu: limit NOT set since originalLimit is nil or 0, "
            "memory request, memory limit",
        },
    )
    assert got.pod["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "300Mi"},
        "requests": {"memory": "300Mi"},
    }
    assert apply_patch(p, got.patch) == got.pod  # the patch says what the pod says
    assert p["spec"]["containers"][0]["resources"] == {"limits": {"memory": "600Mi"}}  # not changed in place


def test_admission_with_mode_off_changes_nothing_but_the_observed_containers() -> None:
    p = pod({"name": "app"})
    got = admit(p, "web-vpa", spec("Off"), RECOMMENDATION)
    assert got.updates == "" and [op["path"] for op in got.patch] == [
        "/metadata/annotations",
        "/metadata/annotations/vpaObservedContainers",
    ]
    assert "resources" not in got.pod["spec"]["containers"][0]


def test_admission_creates_resources_when_the_container_has_none() -> None:
    got = admit(pod({"name": "app"}), "v", spec("Recreate"), RECOMMENDATION)
    paths = [op["path"] for op in got.patch]
    assert paths[2:5] == [
        "/spec/containers/0/resources",
        "/spec/containers/0/resources/requests",
        "/spec/containers/0/resources/requests/cpu",
    ]
    assert got.pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "300Mi"}}


def test_vpa_status_conditions() -> None:
    from nodeagent.cluster.autoscaling.vpa.status import vpa_status

    none = vpa_status({}, False, 1_700_000_000.0, generation=3)
    assert none == {"observedGeneration": 3, "conditions": [
        {"type": "NoPodsMatched", "status": "True", "lastTransitionTime": "2023-11-14T22:13:20Z",
         "reason": "NoPodsMatched", "message": "No pods match this VPA object"},
        {"type": "RecommendationProvided", "status": "False", "lastTransitionTime": "2023-11-14T22:13:20Z",
         "reason": "NoPodsMatched", "message": "No pods match this VPA object"}]}
    later = vpa_status(RECOMMENDATION, True, 1_700_000_060.0, generation=3, previous=none["conditions"],
                       extra=[{"type": "ConfigUnsupported", "status": "True", "reason": "R", "message": "m"}])
    assert later["recommendation"] == RECOMMENDATION
    assert [c["type"] for c in later["conditions"]] == ["ConfigUnsupported", "RecommendationProvided"]
    assert later["conditions"][1] == {"type": "RecommendationProvided", "status": "True",
                                      "lastTransitionTime": "2023-11-14T22:14:20Z"}
    again = vpa_status(RECOMMENDATION, True, 1_700_000_120.0, previous=later["conditions"])
    assert again["conditions"][0]["lastTransitionTime"] == "2023-11-14T22:14:20Z"  # no change: same time
