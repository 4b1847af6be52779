"""The required node affinity of a pod (component-helpers nodeaffinity.GetRequiredNodeAffinity):
spec.nodeSelector (every label) AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed,
requirements within a term ANDed; matchExpressions on labels, matchFields on metadata.name).
A term with no requirements matches nothing; an unparseable requirement fails its term.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common.meta import labels, name, spec


def _requirement(req: Mapping[str, Any], value: str | None) -> bool:
    op, values = req.get("operator"), [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs: Sequence[Mapping[str, Any]] = term.get("matchExpressions") or []
    fields: Sequence[Mapping[str, Any]] = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    lbls = labels(node)
    for req in exprs:
        if not _requirement(req, lbls.get(str(req.get("key")))):
            return False
    return all(req.get("key") == "metadata.name" and _requirement(req, name(node)) for req in fields)


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
