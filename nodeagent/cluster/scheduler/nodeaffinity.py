"""Node affinity (component-helpers nodeaffinity and kube-scheduler's NodeAffinity plugin), pure.

The scalar matchers are shared with the controllers (DaemonSet placement): one reading of the
rules. A requirement is (key, operator, values); a term ANDs its matchExpressions (node labels)
and matchFields (only metadata.name); required terms are ORed; a term with no requirements
matches nothing, and an unparseable requirement (unknown operator, Gt/Lt without one integer)
fails its term, as upstream. `required_mask` and `preferred_scores` evaluate the same rules for
every row of a NodeTable at once (label value ids compared as integer arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nodeagent.cluster.scheduler.node_table import NodeTable

Requirement = tuple[str, str, tuple[str, ...]]  # key, operator, values
Term = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]  # matchExpressions, matchFields
METADATA_NAME = "metadata.name"


def requirement_matches(op: str, values: Sequence[str], value: str | None) -> bool:
    """One NodeSelectorRequirement against a label value (None: the node lacks the key)."""
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        want = _integer(values)
        if value is None or want is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _integer(values: Sequence[str]) -> int | None:
    if len(values) != 1:
        return None
    try:
        return int(values[0])
    except ValueError:
        return None


def parse_term(term: Mapping[str, Any]) -> Term:
    """A NodeSelectorTerm dict as tuples (hashable: part of the scheduler's mask cache key)."""
    def reqs(field: str) -> tuple[Requirement, ...]:
        return tuple((str(r.get("key", "")), str(r.get("operator", "")),
                      tuple(str(v) for v in r.get("values") or ()))
                     for r in term.get(field) or () if isinstance(r, Mapping))
    return reqs("matchExpressions"), reqs("matchFields")


def term_matches(term: Term, labels: Mapping[str, str], name: str) -> bool:
    exprs, fields = term
    if not exprs and not fields:
        return False
    if not all(requirement_matches(op, vals, labels.get(key)) for key, op, vals in exprs):
        return False
    return all(key == METADATA_NAME and requirement_matches(op, vals, name)
               for key, op, vals in fields)


def required_terms(pod_spec: Mapping[str, Any]) -> tuple[Term, ...] | None:
    """requiredDuringSchedulingIgnoredDuringExecution's terms; None when the pod has none."""
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not isinstance(required, Mapping):
        return None
    return tuple(parse_term(t) for t in required.get("nodeSelectorTerms") or ()
                 if isinstance(t, Mapping))


def preferred_terms(pod_spec: Mapping[str, Any]) -> tuple[tuple[int, Term], ...]:
    """preferredDuringSchedulingIgnoredDuringExecution as (weight, term); weight-0 terms dropped."""
    preferred = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("preferredDuringSchedulingIgnoredDuringExecution")) or ()
    out = []
    for p in preferred:
        if isinstance(p, Mapping) and isinstance(p.get("preference"), Mapping):
            weight = int(p.get("weight") or 0)
            if weight:
                out.append((weight, parse_term(p["preference"])))
    return tuple(out)


# ---- vectorised over a NodeTable ------------------------------------------------------------------
def _requirement_mask(t: NodeTable, key: str, op: str, values: tuple[str, ...]) -> np.ndarray:
    n = t.n
    ids = t.labels.get(key)
    col = ids[:n] if ids is not None else np.full(n, -1, np.int32)
    known = t.label_values.get(key, {})
    if op in ("In", "NotIn"):
        vids = [known[v] for v in values if v in known]
        hit = np.isin(col, vids) if vids else np.zeros(n, bool)
        return hit if op == "In" else ~hit
    if op == "Exists":
        return col >= 0
    if op == "DoesNotExist":
        return col < 0
    if op in ("Gt", "Lt"):
        want = _integer(values)
        if want is None:
            return np.zeros(n, bool)
        ok = np.zeros(len(known) + 1, bool)  # by value id; the last slot is -1 (absent)
        for value, vid in known.items():
            ok[vid] = requirement_matches(op, values, value)
        out: np.ndarray = ok[col]
        return out
    return np.zeros(n, bool)


def term_mask(t: NodeTable, term: Term) -> np.ndarray:
    exprs, fields = term
    n = t.n
    if not exprs and not fields:
        return np.zeros(n, bool)
    mask = np.ones(n, bool)
    for key, op, vals in exprs:
        mask &= _requirement_mask(t, key, op, vals)
    for key, op, vals in fields:
        if key != METADATA_NAME:
            return np.zeros(n, bool)
        rows = [t.index[v] for v in vals if v in t.index]
        hit = np.zeros(n, bool)
        hit[rows] = True
        if op == "In":
            mask &= hit
        elif op == "NotIn":
            mask &= ~hit
        else:  # Exists/DoesNotExist/Gt/Lt on a field: upstream rejects them as invalid
            return np.zeros(n, bool)
    return mask


def required_mask(t: NodeTable, terms: tuple[Term, ...]) -> np.ndarray:
    """Rows matching at least one term (no terms at all: none match, as upstream)."""
    mask = np.zeros(t.n, bool)
    for term in terms:
        mask |= term_mask(t, term)
    return mask


def preferred_scores(t: NodeTable, preferred: tuple[tuple[int, Term], ...]) -> np.ndarray:
    """Summed weights of the matching preferred terms per row (NodeAffinity's raw Score)."""
    out = np.zeros(t.n, np.float64)
    for weight, term in preferred:
        out += weight * term_mask(t, term)
    return out
