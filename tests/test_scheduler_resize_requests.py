"""The scheduler's count of a pod being resized in place: per container max(desired, allocated,
actual), max(actual, allocated) when the resize is Infeasible (upstream's resourcehelper.PodRequests
with UseStatusResources, determineContainerReqs), and the cache counting a bound pod again when
its status moves."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.scheduler.framework import PodInfo
from nodeagent.cluster.scheduler.requests import pod_requests
from nodeagent.cluster.scheduling.cache import SchedulerCache
from nodeagent.core.model import parse_pod

MI = 1 << 20


def container(name: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["sleep", "1"], "resources": {"requests": {"cpu": cpu, "memory": memory}},
            **extra}


def status(name: str, actual: tuple[str, str] | None, allocated: tuple[str, str] | None) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name}
    if actual is not None:
        cs["resources"] = {"requests": {"cpu": actual[0], "memory": actual[1]}}
    if allocated is not None:
        cs["allocatedResources"] = {"cpu": allocated[0], "memory": allocated[1]}
    return cs


def pod_obj(containers: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None, *,
            init: list[dict[str, Any]] | None = None, init_statuses: list[dict[str, Any]] | None = None,
            pending: str | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if node:
        spec["nodeName"] = node
    st: dict[str, Any] = {"phase": "Running"}
    if statuses is not None:
        st["containerStatuses"] = statuses
    if init_statuses is not None:
        st["initContainerStatuses"] = init_statuses
    if pending:
        st["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": pending}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": spec, "status": st}


def counted(obj: dict[str, Any]) -> tuple[int, int]:
    got = pod_requests(parse_pod(obj), obj)
    return got["cpu"].milli_value(), got["memory"].value()


@pytest.mark.parametrize(("obj", "want"), [
    # no status resources (not started, or an agent that does not report them): the spec
    (pod_obj([container("a", "500m", "100Mi")]), (500, 100 * MI)),
    (pod_obj([container("a", "500m", "100Mi")], [status("a", None, None)]), (500, 100 * MI)),
    # at rest: all three agree
    (pod_obj([container("a", "500m", "100Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))]),
     (500, 100 * MI)),
    # an increase not yet admitted by the agent: desired is the largest
    (pod_obj([container("a", "1", "300Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))]),
     (1000, 300 * MI)),
    # a decrease admitted (allocated) but not yet actuated: actual is the largest
    (pod_obj([container("a", "200m", "50Mi")], [status("a", ("500m", "100Mi"), ("200m", "50Mi"))]),
     (500, 100 * MI)),
    # per resource, not per container: cpu up, memory down
    (pod_obj([container("a", "1", "50Mi")], [status("a", ("500m", "100Mi"), ("1", "100Mi"))]), (1000, 100 * MI)),
    # Infeasible: the desired will never be applied; actual and allocated count
    (pod_obj([container("a", "8", "100Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))],
             pending="Infeasible"), (500, 100 * MI)),
    # Deferred is not Infeasible: desired counts
    (pod_obj([container("a", "8", "100Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))],
             pending="Deferred"), (8000, 100 * MI)),
    # summed over containers, each with its own max; a container without status keeps its spec
    (pod_obj([container("a", "1", "100Mi"), container("b", "100m", "10Mi")],
             [status("a", ("500m", "200Mi"), ("1", "100Mi"))]), (1100, 210 * MI)),
    # a sidecar's status counts; a regular init container's does not (it runs alone, spec only)
    (pod_obj([container("a", "500m", "100Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))],
             init=[container("side", "100m", "10Mi", restartPolicy="Always"), container("setup", "2", "1Mi")],
             init_statuses=[status("side", ("300m", "10Mi"), ("300m", "10Mi")),
                            status("setup", ("4", "1Mi"), ("4", "1Mi"))]), (2300, 110 * MI)),
])
def test_pod_requests_in_a_resize(obj: dict[str, Any], want: tuple[int, int]) -> None:
    assert counted(obj) == want


def test_pod_info_counts_the_resize_and_its_nonzero_requests() -> None:
    obj = pod_obj([container("a", "200m", "50Mi")], [status("a", ("500m", "100Mi"), ("200m", "50Mi"))])
    info = PodInfo.from_pod(parse_pod(obj), obj=obj)
    assert (info.cpu, info.memory) == (500, 100 * MI)
    assert (info.nonzero_cpu, info.nonzero_memory) == (500, 100 * MI)
    plain = PodInfo.from_pod(parse_pod(obj))  # without the object: the spec, as before
    assert (plain.cpu, plain.memory) == (200, 50 * MI)


def test_the_cache_counts_a_bound_pod_again_when_its_resize_moves() -> None:
    cache = SchedulerCache()
    cache.apply_node("ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {},
                               "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                          "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                          "conditions": [{"type": "Ready", "status": "True"}]}})
    changes: list[int] = []
    cache.on_change = lambda: changes.append(1)

    def held() -> int:
        """The node's cpu allocatable minus its free cpu: what its pods are counted for."""
        table = cache.table
        row, col = table.resource_col("cpu"), table.index["n1"]
        return int(table.alloc[row, col] - table.free[row, col])

    at_rest = pod_obj([container("a", "2", "100Mi")], [status("a", ("2", "100Mi"), ("2", "100Mi"))], node="n1")
    cache.apply_pod("ADDED", at_rest)
    assert held() == 2000
    # the spec goes down to 500m; the agent admits it; the cgroups still run with 2 cores
    admitted = pod_obj([container("a", "500m", "100Mi")], [status("a", ("2", "100Mi"), ("500m", "100Mi"))],
                       node="n1")
    cache.apply_pod("MODIFIED", admitted)
    assert held() == 2000 and not changes
    # a status-only update: actuated, the room comes back and pending pods are told
    done = pod_obj([container("a", "500m", "100Mi")], [status("a", ("500m", "100Mi"), ("500m", "100Mi"))],
                   node="n1")
    cache.apply_pod("MODIFIED", done)
    assert held() == 500 and changes == [1]
