"""Pod requests, limits, QoS and oom_score_adj with init containers and sidecars, as
Kubernetes' resourcehelper.PodRequests / GetPodQOS compute them."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.core.model import parse_pod
from nodeagent.core.qos import is_node_critical, oom_score_adj, qos_class
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.resources import pod_limits, pod_requests


def c(name: str, cpu: str | None = None, mem: str | None = None, sidecar: bool = False, limits: bool = False) -> dict[str, Any]:
    amounts = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    out: dict[str, Any] = {"name": name, "command": ["x"], "resources": {"limits" if limits else "requests": amounts}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Any:
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                      "spec": {"containers": containers, "initContainers": init or []}})


def adj_of(p: Any, container: str, capacity: int) -> int:
    """An init or app container's oom_score_adj from its own memory request (what the pod plan does)."""
    found = next(c for c in [*p.spec.containers, *p.spec.init_containers] if c.name == container)
    request = found.resources.requests.get("memory")
    return oom_score_adj(qos_class(p), is_node_critical(p), request.value() if request is not None else 0, capacity)


def q(d: dict[str, str]) -> dict[str, Any]:
    return {k: parse_quantity(v) for k, v in d.items()}


@pytest.mark.parametrize(("containers", "init", "want"), [
    ([c("a", "1", "1Gi")], None, {"cpu": "1", "memory": "1Gi"}),
    ([c("a", "1", "1Gi")], [c("i", "2", "512Mi")], {"cpu": "2", "memory": "1Gi"}),  # init alone needs more cpu
    ([c("a", "1")], [c("i", "500m")], {"cpu": "1"}),
    # sidecars run with the app containers and with every init container after them
    ([c("a", "1")], [c("s", "500m", sidecar=True)], {"cpu": "1500m"}),
    ([c("a", "1")], [c("s", "500m", sidecar=True), c("i", "2")], {"cpu": "2500m"}),
    ([c("a", "1")], [c("i", "2"), c("s", "500m", sidecar=True)], {"cpu": "2"}),  # the sidecar starts after i
    ([c("a", "100m"), c("b", "100m")], [c("i1", "300m"), c("s1", "50m", sidecar=True), c("i2", "150m")], {"cpu": "300m"}),
])
def test_pod_requests_with_init_containers(containers: list[Any], init: list[Any] | None, want: dict[str, str]) -> None:
    assert pod_requests(pod(containers, init)) == q(want)


def test_pod_limits_follow_the_same_rule() -> None:
    p = pod([c("a", "1", "1Gi", limits=True)], [c("s", "1", "256Mi", sidecar=True, limits=True), c("i", "3", limits=True)])
    assert pod_limits(p) == q({"cpu": "4", "memory": "1280Mi"})


def test_qos_counts_init_containers() -> None:
    assert qos_class(pod([c("a")], [c("i", "1", "1Gi", limits=True)])) == "Burstable"
    guaranteed = pod([c("a", "1", "1Gi", limits=True)], [c("i", "1", "1Gi", limits=True)])
    assert qos_class(guaranteed) == "Guaranteed"
    assert qos_class(pod([c("a", "1", "1Gi", limits=True)], [c("i")])) == "Burstable"  # an init container without limits
    assert adj_of(pod([c("a", mem="1Gi")], [c("i", mem="2Gi")]), "i", 8 * 2**30) == 750
