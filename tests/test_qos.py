"""QoS class, criticality and oom_score_adj against the kubelet's own test vectors.

Vectors come from kubernetes pkg/apis/core/v1/helper/qos/qos_test.go (TestComputePodQOS) and
pkg/kubelet/qos/policy_test.go (TestGetContainerOOMScoreAdjust). Those tests build pods without
API defaulting, so they are replayed on raw pods (`Pod.model_validate`, no defaulting); where
defaulting changes the answer, the defaulted result is checked too.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.core.model import Pod, parse_pod
from nodeagent.core.qos import (
    BESTEFFORT_OOM_SCORE_ADJ,
    GUARANTEED_OOM_SCORE_ADJ,
    KUBELET_OOM_SCORE_ADJ,
    is_critical,
    is_node_critical,
    is_static,
    oom_score_adj,
    qos_class,
)

STANDARD_MEMORY = 8_000_000_000
Res = dict[str, Any]


def _rl(cpu: str = "", memory: str = "", **extra: str) -> Res:
    out: Res = {}
    if cpu:
        out["cpu"] = cpu
    if memory:
        out["memory"] = memory
    out.update({k.replace("_", "-"): v for k, v in extra.items()})
    return out


def _manifest(containers: list[tuple[Res, Res]], **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {
            "containers": [
                {"name": f"c{i}", "command": ["true"], "resources": {"requests": req, "limits": lim}}
                for i, (req, lim) in enumerate(containers)
            ],
            **spec,
        },
    }


def raw_pod(containers: list[tuple[Res, Res]], **spec: Any) -> Pod:
    """A pod exactly as written: no defaulting, like the pods in the upstream tests."""
    return Pod.model_validate(_manifest(containers, **spec))


def pod(containers: list[tuple[Res, Res]], **spec: Any) -> Pod:
    return parse_pod(_manifest(containers, **spec))


G, B, BE = "Guaranteed", "Burstable", "BestEffort"
QOS_CASES = [
    ("guaranteed", [(_rl("100m", "100Mi"), _rl("100m", "100Mi"))], G),
    ("guaranteed-guaranteed", [(_rl("100m", "100Mi"), _rl("100m", "100Mi"))] * 2, G),
    ("best-effort-best-effort", [(_rl(), _rl())] * 2, BE),
    ("best-effort", [(_rl(), _rl())], BE),
    ("best-effort-burstable", [(_rl(), _rl()), (_rl("1"), _rl("2"))], B),
    ("best-effort-guaranteed", [(_rl(), _rl()), (_rl("10m", "100Mi"), _rl("10m", "100Mi"))], B),
    ("burstable-cpu-guaranteed-memory", [(_rl("", "100Mi"), _rl("", "100Mi"))], B),
    ("burstable-no-limits", [(_rl("100m", "100Mi"), _rl())], B),
    ("burstable-guaranteed", [(_rl("1", "100Mi"), _rl("2", "100Mi")), (_rl("100m", "100Mi"), _rl("100m", "100Mi"))], B),
    ("burstable-unbounded-but-requests-match-limits",
     [(_rl("100m", "100Mi"), _rl("200m", "200Mi")), (_rl("100m", "100Mi"), _rl())], B),
    ("burstable-1", [(_rl("10m", "100Mi"), _rl("100m", "200Mi"))], B),
    ("burstable-2", [(_rl("0", "0"), _rl("100m", "200Mi"))], B),
    ("best-effort-hugepages", [(_rl("0", "0", hugepages_2Mi="1Gi"), _rl("0", "0", hugepages_2Mi="1Gi"))], BE),
    # ours: limits only (requests default to them), and extended resources do not count
    ("guaranteed-limits-only", [(_rl(), _rl("1", "1Gi"))], G),
    ("guaranteed-with-extended", [(_rl(), {"cpu": "1", "memory": "1Gi", "example.com/foo": "2"})], G),
    ("best-effort-extended-only", [(_rl(), {"example.com/foo": "2"})], BE),
    ("burstable-one-of-two-limited", [(_rl(), _rl("1", "1Gi")), (_rl(), _rl("1"))], B),
]


@pytest.mark.parametrize(("containers", "want"), [c[1:] for c in QOS_CASES], ids=[c[0] for c in QOS_CASES])
def test_qos_class(containers: list[tuple[Res, Res]], want: str) -> None:
    assert qos_class(pod(containers)) == want


def test_qos_class_of_raw_limits_only_pod_is_burstable() -> None:
    # Without defaulting the sums differ ({} vs limits): the upstream function says Burstable.
    assert qos_class(raw_pod([(_rl(), _rl("1", "1Gi"))])) == B


def _crit(klass: str, priority: int) -> dict[str, Any]:
    return {"priorityClassName": klass, "priority": priority}


# (name, pod factory, containers, spec, memory capacity, low, high)
OOM_CASES: list[tuple[str, Any, list[tuple[Res, Res]], dict[str, Any], int, int, int]] = [
    ("cpu-limit", raw_pod, [(_rl(), _rl("10"))], {}, 4_000_000_000, 999, 999),
    ("memory-limit-cpu-request", raw_pod, [(_rl("0"), _rl("", "10G"))], {}, 8_000_000_000, 999, 999),
    ("zero-memory-limit", raw_pod, [(_rl(), _rl("", "0"))], {}, 7_230_457_451, 1000, 1000),
    ("no-request-limit", raw_pod, [(_rl(), _rl())], {}, 4_000_000_000, 1000, 1000),
    ("equal-request-limit-cpu-memory", raw_pod, [(_rl("5m", "10G"), _rl("5m", "10G"))], {}, 123_456_789, -997, -997),
    ("cpu-unlimited-memory-limited-with-requests", raw_pod,
     [(_rl("5m", str(STANDARD_MEMORY // 2)), _rl("", "10G"))], {}, STANDARD_MEMORY, 495, 505),
    ("request-no-limit", raw_pod, [(_rl("5m", str(STANDARD_MEMORY - 1)), _rl())], {}, STANDARD_MEMORY, 3, 3),
    ("cluster-critical", raw_pod, [(_rl(), _rl())], _crit("system-cluster-critical", 2_000_000_000),
     4_000_000_000, 1000, 1000),
    ("node-critical", raw_pod, [(_rl(), _rl())], _crit("system-node-critical", 2_000_001_000), 4_000_000_000, -997, -997),
    ("burstable-unique-container", raw_pod,
     [(_rl("", str(STANDARD_MEMORY // 8)), _rl("", str(1000 + STANDARD_MEMORY // 8)))], {}, STANDARD_MEMORY, 875, 880),
    # the same pods after defaulting, as the kubelet really sees them
    ("memory-limit-cpu-request-defaulted", pod, [(_rl("0"), _rl("", "10G"))], {}, 8_000_000_000, 3, 3),
    ("cpu-limit-defaulted", pod, [(_rl(), _rl("10"))], {}, 4_000_000_000, 999, 999),
    ("node-critical-by-class-only", pod, [(_rl("100m"), _rl())], {"priorityClassName": "system-node-critical"},
     STANDARD_MEMORY, -997, -997),
    ("half-of-memory", pod, [(_rl("", "4G"), _rl())], {}, STANDARD_MEMORY, 500, 500),
    ("tiny-request-stays-below-besteffort", pod, [(_rl("", "1"), _rl())], {}, STANDARD_MEMORY, 999, 999),
    ("guaranteed-defaulted", pod, [(_rl(), _rl("1", "1Gi"))], {}, STANDARD_MEMORY, -997, -997),
]


def adj_of(p: Pod, container: str, capacity: int) -> int:
    """The container's oom_score_adj from its pod's class and criticality (what the pod's plan does)."""
    c = next(c for c in p.spec.containers if c.name == container)
    request = c.resources.requests.get("memory")
    return oom_score_adj(qos_class(p), is_node_critical(p), request.value() if request is not None else 0, capacity)


@pytest.mark.parametrize(
    ("factory", "containers", "spec", "capacity", "low", "high"),
    [c[1:] for c in OOM_CASES],
    ids=[c[0] for c in OOM_CASES],
)
def test_oom_score_adj(
    factory: Any, containers: list[tuple[Res, Res]], spec: dict[str, Any], capacity: int, low: int, high: int
) -> None:
    p = factory(containers, **spec)
    adj = adj_of(p, "c0", capacity)
    assert low <= adj <= high


def test_oom_score_adj_is_per_container() -> None:
    p = pod([(_rl("", "4G"), _rl()), (_rl("", "2G"), _rl())])
    assert adj_of(p, "c0", STANDARD_MEMORY) == 500
    assert adj_of(p, "c1", STANDARD_MEMORY) == 750


def test_oom_score_adj_rejects_bad_input() -> None:
    p = pod([(_rl(), _rl())])
    with pytest.raises(ValueError, match="capacity"):
        adj_of(p, "c0", 0)


def test_constants() -> None:
    assert (KUBELET_OOM_SCORE_ADJ, GUARANTEED_OOM_SCORE_ADJ, BESTEFFORT_OOM_SCORE_ADJ) == (-999, -997, 1000)


@pytest.mark.parametrize(
    ("spec", "critical", "node_critical", "static"),
    [
        ({}, False, False, False),
        ({"priority": 1_999_999_999}, False, False, False),
        ({"priority": 2_000_000_000}, True, False, False),
        ({"priorityClassName": "system-cluster-critical"}, True, False, False),
        ({"priorityClassName": "system-node-critical"}, True, True, False),
        ({"annotations": {"kubernetes.io/config.source": "file"}}, True, False, True),
        ({"annotations": {"kubernetes.io/config.source": "http"}}, True, False, True),
        ({"annotations": {"kubernetes.io/config.source": "api"}}, False, False, False),
        ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, True, False, False),
        ({"annotations": {"kubernetes.io/config.source": "file"}, "priorityClassName": "system-node-critical"},
         True, True, True),
    ],
)
def test_criticality(spec: dict[str, Any], critical: bool, node_critical: bool, static: bool) -> None:
    p = pod([(_rl(), _rl())], **spec)
    assert is_critical(p) is critical
    assert is_node_critical(p) is node_critical
    assert is_static(p) is static


def test_node_critical_class_without_critical_priority_is_not_node_critical() -> None:
    # IsNodeCriticalPod needs IsCriticalPod too; only reachable without the API-style defaulting.
    p = raw_pod([(_rl(), _rl())], priorityClassName="system-node-critical", priority=0)
    assert not is_critical(p)
    assert not is_node_critical(p)
    assert adj_of(p, "c0", STANDARD_MEMORY) == BESTEFFORT_OOM_SCORE_ADJ
