"""The required node affinity of a pod (component-helpers nodeaffinity.GetRequiredNodeAffinity):
spec.nodeSelector (every label) AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed,
requirements within a term ANDed; matchExpressions on labels, matchFields on metadata.name).
A term with no requirements matches nothing; an unparseable requirement fails its term.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import labels, name, spec
from nodeagent.cluster.scheduler import nodeaffinity as na


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The scheduler's reading of a NodeSelectorTerm (one set of rules for both)."""
    return na.term_matches(na.parse_term(term), labels(node), name(node))


def required_affinity_matches(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    lbls = labels(node)
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if lbls.get(k) != v:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in spec(node).get("taints") or [] if isinstance(t, Mapping)]
