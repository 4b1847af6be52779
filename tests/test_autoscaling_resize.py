"""In-place resize as the control plane sees it: the scheduler's accounting, and the core's decision re-exported."""

from __future__ import annotations

from nodeagent.cluster.autoscaling import resize as cluster_resize
from nodeagent.cluster.autoscaling.resize import Resources, scheduler_requests
from nodeagent.core import resize as core_resize

GI = 1 << 30


def c(cpu: int, mem: int, name: str = "app") -> Resources:
    return Resources(name, {"cpu": cpu, "memory": mem})


def test_scheduler_accounts_the_max_of_desired_allocated_and_actual() -> None:
    desired, allocated, actual = [c(2000, GI)], [c(1000, 2 * GI)], [c(500, 3 * GI)]
    assert scheduler_requests(desired, allocated, actual) == {"cpu": 2000, "memory": 3 * GI}
    assert scheduler_requests(desired, allocated, actual, infeasible=True) == {"cpu": 1000, "memory": 3 * GI}


def test_the_control_plane_uses_the_agents_decision() -> None:
    """One definition: the autoscalers decide resizes with the very functions the agent runs."""
    for name in ("decide", "conditions", "retry_order", "validate_resize", "qos_class", "Resources"):
        assert getattr(cluster_resize, name) is getattr(core_resize, name)
