"""ResourceQuota: parsing, what a pod uses, accept/reject with the API server's messages, used."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.admission.quota import (
    QuotaExceeded,
    QuotaMissingRequests,
    ResourceQuota,
    charge,
    check,
    check_object,
    compute_used,
    object_usage,
    parse_resource_quota,
    pod_usage,
)
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.quantity import Quantity, parse_quantity

_n = 0


def pod(*resources: dict[str, Any], namespace: str = "team") -> Pod:
    global _n
    _n += 1
    return parse_pod({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": f"p{_n}", "namespace": namespace},
                      "spec": {"containers": [{"name": f"c{i}", "command": ["x"], "resources": r}
                                              for i, r in enumerate(resources)]}})


def quota(**hard: str) -> ResourceQuota:
    return parse_resource_quota({"apiVersion": "v1", "kind": "ResourceQuota",
                                 "metadata": {"name": "compute", "namespace": "team"},
                                 "spec": {"hard": {k.replace("_", "."): v for k, v in hard.items()}}})


def q(text: str) -> Quantity:
    return parse_quantity(text)


def as_text(items: dict[str, Quantity]) -> dict[str, str]:
    return {k: str(v) for k, v in items.items()}


def test_pod_usage_counts_requests_limits_and_the_pod() -> None:
    p = pod({"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            {"limits": {"cpu": "1", "example.com/gpu": "1"}})
    assert as_text(pod_usage(p)) == {
        "count/pods": "1", "pods": "1", "cpu": "1250m", "requests.cpu": "1250m",
        "limits.cpu": "1", "memory": "1Gi", "requests.memory": "1Gi", "limits.memory": "2Gi",
        "requests.example.com/gpu": "1"}
    assert as_text(object_usage("services")) == {"count/services": "1", "services": "1"}
    assert as_text(object_usage("jobs.batch")) == {"count/jobs.batch": "1"}


def test_accepts_within_the_quota_and_rejects_beyond_it() -> None:
    qt = quota(requests_memory="2Gi")
    used = {"requests.memory": q("1Gi")}
    assert check(qt, used, pod({"requests": {"memory": "1Gi"}})) is None
    err = check(qt, used, pod({"requests": {"memory": "2Gi"}}))
    assert isinstance(err, QuotaExceeded)
    assert str(err) == ("exceeded quota: compute, requested: requests.memory=2Gi, "
                        "used: requests.memory=1Gi, limited: requests.memory=2Gi")


def test_every_exceeded_resource_is_listed_sorted() -> None:
    qt = quota(pods="2", limits_cpu="2", requests_cpu="1", memory="10Gi")
    used = {"pods": q("2"), "limits.cpu": q("1500m"), "requests.cpu": q("500m"),
            "memory": q("1Gi")}
    err = check(qt, used, pod({"requests": {"cpu": "500m", "memory": "1Gi"},
                               "limits": {"cpu": "1", "memory": "1Gi"}}))
    assert str(err) == ("exceeded quota: compute, requested: limits.cpu=1,pods=1, "
                        "used: limits.cpu=1500m,pods=2, limited: limits.cpu=2,pods=2")


def test_quota_on_cpu_or_memory_needs_every_container_to_say() -> None:
    qt = quota(requests_cpu="10", limits_memory="10Gi")
    err = check(qt, {}, pod({"requests": {"cpu": "1"}}, {"limits": {"memory": "1Gi"}}))
    assert isinstance(err, QuotaMissingRequests)
    assert str(err) == ("failed quota: compute: must specify limits.memory for: c0; "
                        "requests.cpu for: c1")
    # a memory limit sets the memory request (defaulting), and c1 states a cpu request
    assert check(qt, {}, pod({"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}})) is None
    assert check(quota(pods="5"), {}, pod({})) is None  # counts need no requests


def test_other_namespaces_are_not_this_quotas_business() -> None:
    qt = quota(pods="0")
    assert check(qt, {}, pod({}, namespace="elsewhere")) is None
    assert isinstance(check(qt, {}, pod({})), QuotaExceeded)


def test_used_is_recomputed_from_the_namespace_pods_and_objects() -> None:
    qt = quota(pods="10", requests_cpu="4", limits_memory="8Gi", services="3",
               requests_storage="1Ti", **{"count/pods": "20", "count/services": "3"})
    pods = [pod({"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}),
            pod({"requests": {"cpu": "1"}}),
            pod({"requests": {"cpu": "3"}}, namespace="other")]
    used = compute_used(qt, pods, {"services": 2, "configmaps": 4})
    assert as_text(used) == {"pods": "2", "requests.cpu": "1500m", "limits.memory": "1Gi",
                             "count/pods": "2", "services": "2", "count/services": "2",
                             "requests.storage": "0"}
    err = check_object(qt, {**used, "services": q("3")}, "services", "team")
    assert str(err) == ("exceeded quota: compute, requested: services=1, used: services=3, "
                        "limited: services=3")
    assert check_object(qt, used, "services", "team") is None


def test_charge_and_release_track_used() -> None:
    qt = quota(pods="10", requests_memory="4Gi")
    p = pod({"requests": {"memory": "1Gi"}})
    used = charge(qt, compute_used(qt, []), pod_usage(p))
    assert as_text(used) == {"pods": "1", "requests.memory": "1Gi"}
    used = charge(qt, used, pod_usage(p), sign=-1)
    used = charge(qt, used, pod_usage(p), sign=-1)
    assert as_text(used) == {"pods": "0", "requests.memory": "0"}


@pytest.mark.parametrize("hard, message", [
    ({"cpus": "1"}, "spec.hard[cpus]: Invalid value: \"cpus\": must be a standard resource for quota"),
    ({"memory": "-1Gi"}, "spec.hard[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0"),
    ({"memory": "lots"}, "spec.hard[memory]: Invalid value: \"lots\""),
])
def test_invalid_quotas_name_the_field(hard: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationErrors) as exc:
        parse_resource_quota({"apiVersion": "v1", "kind": "ResourceQuota",
                              "metadata": {"name": "q", "namespace": "team"},
                              "spec": {"hard": hard}})
    assert message in str(exc.value)


def test_extended_and_object_count_names_are_accepted() -> None:
    qt = quota(**{"requests_example.com/gpu": "2", "count/deployments.apps": "5",
                  "hugepages-2Mi": "1Gi"})
    assert set(qt.hard) == {"requests.example.com/gpu", "count/deployments.apps", "hugepages-2Mi"}
