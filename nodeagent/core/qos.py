"""QoS class, criticality and oom_score_adj, exactly as the kubelet computes them (pure).

Sources: pkg/apis/core/v1/helper/qos (GetPodQOS), pkg/kubelet/types/pod_update.go
(IsCriticalPod, IsNodeCriticalPod, IsStaticPod) and pkg/kubelet/qos/policy.go
(GetContainerOOMScoreAdjust; its sidecar-container adjustment, a sidecar's value capped at the
lowest of the app containers', is applied by the pod plan, agent/pods/plan.py).
"""

from __future__ import annotations

from typing import Literal

from nodeagent.core.model import SYSTEM_CRITICAL_PRIORITY, SYSTEM_NODE_CRITICAL, Pod
from nodeagent.core.quantity import Quantity
from nodeagent.core.wellknown import API_SERVER_SOURCE, CONFIG_MIRROR, CONFIG_SOURCE

QOSClass = Literal["Guaranteed", "Burstable", "BestEffort"]
GUARANTEED: QOSClass = "Guaranteed"
BURSTABLE: QOSClass = "Burstable"
BEST_EFFORT: QOSClass = "BestEffort"

KUBELET_OOM_SCORE_ADJ = -999  # the agent itself
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
BURSTABLE_MIN_OOM_SCORE_ADJ = 1000 + GUARANTEED_OOM_SCORE_ADJ  # 3: stays above Guaranteed
BURSTABLE_MAX_OOM_SCORE_ADJ = BESTEFFORT_OOM_SCORE_ADJ - 1  # 999: stays below BestEffort

_QOS_RESOURCES = ("cpu", "memory")


def qos_class(pod: Pod) -> QOSClass:
    """GetPodQOS: only cpu and memory count, and only their positive values.

    BestEffort: no positive cpu/memory request or limit anywhere (init containers included).
    Guaranteed: every container (init containers included) has positive cpu and memory limits and
    the pod's summed requests equal its summed limits. Anything else is Burstable.
    """
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    for c in [*pod.spec.containers, *pod.spec.init_containers]:  # GetPodQOS counts init containers
        for name in _QOS_RESOURCES:
            request = c.resources.requests.get(name)
            if request is not None and request.sign() > 0:
                requests[name] = requests[name] + request if name in requests else request
        found = set()
        for name in _QOS_RESOURCES:
            limit = c.resources.limits.get(name)
            if limit is not None and limit.sign() > 0:
                found.add(name)
                limits[name] = limits[name] + limit if name in limits else limit
        if found != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and all(limits.get(n) == q for n, q in requests.items()) and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE


def is_static(pod: Pod) -> bool:
    """Static pods carry a config-source annotation other than "api" (kubelet's IsStaticPod)."""
    source = pod.metadata.annotations.get(CONFIG_SOURCE)
    return source is not None and source != API_SERVER_SOURCE


def is_mirror(pod: Pod) -> bool:
    return CONFIG_MIRROR in pod.metadata.annotations


def is_critical(pod: Pod) -> bool:
    """Critical pods are never evicted: static or mirror pods, or priority >= 2000000000."""
    return is_static(pod) or is_mirror(pod) or pod.spec.priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical(pod: Pod) -> bool:
    """Critical and of class system-node-critical: these get the Guaranteed oom_score_adj."""
    return is_critical(pod) and pod.spec.priority_class_name == SYSTEM_NODE_CRITICAL


def oom_score_adj(qos: QOSClass, node_critical: bool, memory_request_bytes: int, memory_capacity_bytes: int) -> int:
    """GetContainerOOMScoreAdjust for one container of a pod of class `qos` (`node_critical`:
    is_node_critical(pod)), from the container's own memory request: -997 node-critical and
    Guaranteed, 1000 BestEffort, else 1000 - 1000*memoryRequest/capacity clamped to [3, 999], so a
    container that asks for more of the node's memory is killed later.
    """
    if memory_capacity_bytes <= 0:
        raise ValueError(f"memory capacity must be positive, got {memory_capacity_bytes}")
    if node_critical or qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    adj = 1000 - (1000 * memory_request_bytes) // memory_capacity_bytes
    if adj < BURSTABLE_MIN_OOM_SCORE_ADJ:
        return BURSTABLE_MIN_OOM_SCORE_ADJ
    if adj == BESTEFFORT_OOM_SCORE_ADJ:
        return BURSTABLE_MAX_OOM_SCORE_ADJ
    return adj
