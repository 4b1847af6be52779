"""In-place resize as the control plane sees it: the core's decision re-exported."""

from __future__ import annotations

from nodeagent.cluster.autoscaling import resize as cluster_resize
from nodeagent.core import resize as core_resize


def test_the_control_plane_uses_the_agents_decision() -> None:
    """One definition: the autoscalers decide resizes with the very functions the agent runs."""
    for name in ("decide", "conditions", "retry_order", "validate_resize", "qos_class", "Resources"):
        assert getattr(cluster_resize, name) is getattr(core_resize, name)
