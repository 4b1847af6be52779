"""Which nodes run a daemon pod (daemon_controller.go NodeShouldRunDaemonPod, predicates, NewPod;
util/daemonset_util.go AddOrUpdateDaemonPodTolerations, ReplaceDaemonSetPodNodeNameNodeAffinity,
GetTargetNodeName).

A DaemonSet places its pods itself, but lets the scheduler bind them: each pod is pinned to its
node by a required node affinity on `metadata.name` (not `spec.nodeName`), so the scheduler's
resource fit and preemption still apply. The placement test simulates the pod on the node with
the tolerations the controller adds to every daemon pod: a daemon survives its node going
not-ready or unreachable, and runs on nodes under pressure or cordoned.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import name, spec
from nodeagent.cluster.controllers.common.nodeaffinity import node_taints, required_affinity_matches
from nodeagent.cluster.controllers.common.taints import add_or_update_toleration, untolerated
from nodeagent.core import wellknown

Obj = Mapping[str, Any]
NODE_NAME_FIELD = "metadata.name"  # metav1.ObjectNameField

# (key, effect) of the tolerations every daemon pod gets; the network one only with hostNetwork
DAEMON_TOLERATIONS: tuple[tuple[str, str], ...] = (
    (wellknown.TAINT_NOT_READY, "NoExecute"),
    (wellknown.TAINT_UNREACHABLE, "NoExecute"),
    (wellknown.TAINT_DISK_PRESSURE, "NoSchedule"),
    (wellknown.TAINT_MEMORY_PRESSURE, "NoSchedule"),
    (wellknown.TAINT_PID_PRESSURE, "NoSchedule"),
    (wellknown.TAINT_UNSCHEDULABLE, "NoSchedule"),
)
HOST_NETWORK_TOLERATION = (wellknown.TAINT_NETWORK_UNAVAILABLE, "NoSchedule")


def add_daemon_tolerations(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """AddOrUpdateDaemonPodTolerations on a copy: Exists tolerations without tolerationSeconds,
    replacing a toleration of the same key, operator, value and effect."""
    out = copy.deepcopy(dict(pod_spec))
    wanted = list(DAEMON_TOLERATIONS)
    if out.get("hostNetwork"):
        wanted.append(HOST_NETWORK_TOLERATION)
    tols: list[dict[str, Any]] = [dict(t) for t in out.get("tolerations") or []]
    for key, effect in wanted:
        tols = add_or_update_toleration(tols, {"key": key, "operator": "Exists", "effect": effect})
    out["tolerations"] = tols
    return out


def should_run(node: Obj, ds: Obj) -> tuple[bool, bool]:
    """NodeShouldRunDaemonPod: (shouldRun, shouldContinueRunning).

    shouldRun: a pod would be created here. shouldContinueRunning: a pod already here may stay;
    an untolerated NoSchedule taint stops new pods but keeps running ones, an untolerated
    NoExecute taint removes them.
    """
    node_name = name(node)
    template_node = str(((spec(ds).get("template") or {}).get("spec") or {}).get("nodeName") or "")
    if template_node and template_node != node_name:
        return False, False
    template_spec = (spec(ds).get("template") or {}).get("spec") or {}
    if not required_affinity_matches(template_spec, node):
        return False, False
    taints = node_taints(node)
    if not taints:
        return True, True
    # the simulated pod's tolerations only (NewPod copies the whole spec: a copy per node is costly)
    tolerations = add_daemon_tolerations(
        {"tolerations": template_spec.get("tolerations") or [], "hostNetwork": template_spec.get("hostNetwork")}
    )["tolerations"]
    if untolerated(taints, tolerations, lambda t: t.get("effect") in ("NoExecute", "NoSchedule")) is not None:
        return False, untolerated(taints, tolerations, lambda t: t.get("effect") == "NoExecute") is None
    return True, True


def pin_to_node(affinity: Mapping[str, Any] | None, node_name: str) -> dict[str, Any]:
    """ReplaceDaemonSetPodNodeNameNodeAffinity: the required node affinity becomes one term
    `metadata.name In [node]`; preferred terms and pod (anti-)affinity are kept."""
    term = {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node_name]}]}
    out = copy.deepcopy(dict(affinity or {}))
    node_affinity = dict(out.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    required["nodeSelectorTerms"] = [term]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    out["nodeAffinity"] = node_affinity
    return out


def target_node_name(pod: Obj) -> str | None:
    """GetTargetNodeName: spec.nodeName, else the node a pending pod is pinned to (the first
    `metadata.name In [one value]` matchField); None when neither says (the pod is ignored)."""
    pod_spec = spec(pod)
    if pod_spec.get("nodeName"):
        return str(pod_spec["nodeName"])
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, Mapping):
        return None
    for term in required.get("nodeSelectorTerms") or []:
        for req in (term or {}).get("matchFields") or []:
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In":
                values = req.get("values") or []
                return str(values[0]) if len(values) == 1 else None
    return None
