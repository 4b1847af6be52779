"""Where a pod goes relative to other pods: PodTopologySpread and required pod anti-affinity (pure).

Follows kube-scheduler's plugins (pkg/scheduler/framework/plugins/podtopologyspread and
interpodaffinity), vectorised over a NodeTable. Matching pods are counted per node from the
table's label sets (`NodeTable.set_counts`): replicas share their labels, so a selector is
evaluated against a few (namespace, labels) sets and the counts are summed as arrays.

- Topology spread, Filter (whenUnsatisfiable DoNotSchedule): per constraint, matching pods in the
  constraint's namespace are counted per topology domain over the eligible nodes (those with every
  hard constraint's key, and by default matching the pod's nodeSelector/required node affinity,
  nodeAffinityPolicy Honor; taints ignored, nodeTaintsPolicy Ignore). A node without the key fails
  ("... (missing required label)"); otherwise skew = count(domain) + selfMatch - min over domains
  (0 when fewer than minDomains domains exist) must not exceed maxSkew.
- Topology spread, Score (ScheduleAnyway, or the system defaults for a pod with no constraints of
  its own): per node sum of count*log(domains+2) + (maxSkew-1), rounded; normalised to
  100*(max+min-s)/max over the scored nodes (fewer matching pods score higher). With its own
  constraints, nodes missing any key score 0.
- System defaults (kube-scheduler's DefaultConstraints): hostname maxSkew 3 and zone maxSkew 5,
  ScheduleAnyway, for pods owned by a ReplicaSet, ReplicationController or StatefulSet. Upstream's
  selector is the union of the selectors of the Services/RCs/RSs/StatefulSets that select the
  pod; the scheduler here does not watch those, so it uses the pod's own labels (a replica's
  template labels, which its owner's selector is a subset of): siblings of one owner share them.
- Required pod affinity, Filter: every term needs a matching pod in the node's domain ("node(s)
  didn't match pod affinity rules"), except for the first pod of a set that matches itself.
- Required pod anti-affinity, Filter: the incoming pod's terms (a node fails when any matching pod
  is in its topology domain: "node(s) didn't match pod anti-affinity rules") and the bound pods'
  terms against the incoming pod ("node(s) didn't satisfy existing pods anti-affinity rules").
  A term's namespaces default to the pod's own; an empty namespaceSelector means all namespaces.
Not modelled: matchLabelKeys, preferred pod (anti-)affinity, non-empty namespaceSelectors (read as
the pod's own namespace); terminating
pods still count (the table counts them until they are gone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeagent.cluster.scheduler.node_table import NodeTable
from nodeagent.core.selectors import LabelSelector, Requirement
from nodeagent.core.wellknown import LABEL_HOSTNAME

LABEL_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
DEFAULT_SPREAD_OWNERS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet"})
MAX_NODE_SCORE = 100

REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector(sel: Any) -> LabelSelector | None:
    """A metav1.LabelSelector dict; None (null, or an operator we do not know) matches nothing,
    {} matches everything."""
    if not isinstance(sel, Mapping):
        return None
    reqs = [Requirement(str(k), "=", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()]
    for e in sel.get("matchExpressions") or ():
        op = _OPS.get(str(e.get("operator")))
        if op is None:
            return None
        reqs.append(Requirement(str(e.get("key")), op,  # type: ignore[arg-type]
                                tuple(str(v) for v in e.get("values") or ())))
    return LabelSelector(tuple(reqs))


def _selects(sel: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return sel is not None and sel.matches(labels)


@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy Honor (the default)
    honor_taints: bool = False  # nodeTaintsPolicy Ignore (the default)


@dataclass(frozen=True)
class PodTerm:
    """A required pod (anti-)affinity term; `namespaces` None means every namespace."""

    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    topology_key: str

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and \
            _selects(self.selector, labels)


def system_default_constraints(labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    sel = LabelSelector(tuple(Requirement(k, "=", (v,)) for k, v in sorted(labels.items())))
    return (SpreadConstraint(3, LABEL_HOSTNAME, SCHEDULE_ANYWAY, sel),
            SpreadConstraint(5, LABEL_ZONE, SCHEDULE_ANYWAY, sel))


@dataclass(frozen=True)
class Placement:
    """The pod-to-pod rules of one pending pod, parsed once from its object."""

    namespace: str
    labels: Mapping[str, str]
    spread: tuple[SpreadConstraint, ...] = ()
    system_default: bool = False  # `spread` holds the system defaults
    anti_affinity: tuple[PodTerm, ...] = ()
    affinity: tuple[PodTerm, ...] = ()  # required pod affinity

    @property
    def hard(self) -> tuple[SpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.when_unsatisfiable == DO_NOT_SCHEDULE)

    @property
    def soft(self) -> tuple[SpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.when_unsatisfiable != DO_NOT_SCHEDULE)


def placement_of(obj: Mapping[str, Any]) -> Placement:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ns = str(meta.get("namespace") or "")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    spread = tuple(
        SpreadConstraint(
            max_skew=int(c.get("maxSkew") or 1), topology_key=str(c.get("topologyKey") or ""),
            when_unsatisfiable=str(c.get("whenUnsatisfiable") or DO_NOT_SCHEDULE),
            selector=label_selector(c.get("labelSelector")),
            min_domains=int(c.get("minDomains") or 1),
            honor_affinity=(c.get("nodeAffinityPolicy") or "Honor") == "Honor",
            honor_taints=(c.get("nodeTaintsPolicy") or "Ignore") == "Honor")
        for c in spec.get("topologySpreadConstraints") or () if isinstance(c, Mapping))
    default = False
    if not spread and labels and any(
            isinstance(o, Mapping) and o.get("controller") and o.get("kind") in DEFAULT_SPREAD_OWNERS
            for o in meta.get("ownerReferences") or ()):
        spread, default = system_default_constraints(labels), True
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or ()
    terms = tuple(_pod_term(t, ns) for t in anti if isinstance(t, Mapping))
    near = ((spec.get("affinity") or {}).get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or ()
    affinity = tuple(_pod_term(t, ns) for t in near if isinstance(t, Mapping))
    return Placement(ns, labels, spread, default, terms, affinity)


def _pod_term(t: Mapping[str, Any], ns: str) -> PodTerm:
    names: frozenset[str] | None = frozenset(str(n) for n in t.get("namespaces") or ())
    if not names:
        names = None if t.get("namespaceSelector") == {} else frozenset({ns})
    return PodTerm(label_selector(t.get("labelSelector")), names, str(t.get("topologyKey") or ""))


# ---- counting ---------------------------------------------------------------------------------
def matching_counts(t: NodeTable, namespaces: Sequence[str] | frozenset[str] | None,
                    sel: LabelSelector | None) -> np.ndarray:
    """Per node, how many bound pods in `namespaces` (None: any) the selector matches."""
    out = np.zeros(t.n, np.int64)
    if sel is None:
        return out
    for sid, (ns, labels) in enumerate(t.set_labels):
        if (namespaces is None or ns in namespaces) and sel.matches(labels):
            out += t.set_counts[sid, : t.n]
    return out


def _column(t: NodeTable, key: str) -> tuple[np.ndarray, int]:
    """Value ids of `key` per node (-1: absent) and how many values it has."""
    ids = t.labels.get(key)
    if ids is None:
        return np.full(t.n, -1, np.int32), 0
    return ids[: t.n], len(t.label_values[key])


def _at(per_value: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """per_value[ids] per node, 0 where the node lacks the key (id -1)."""
    padded = np.concatenate([per_value.astype(np.float64), np.zeros(1)])
    out: np.ndarray = padded[ids]
    return out


def _domain_sums(ids: np.ndarray, nvals: int, counts: np.ndarray,
                 rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value id: the summed counts over `rows` (bool), and whether any such row has it."""
    sel = rows & (ids >= 0)
    sums = np.bincount(ids[sel], weights=counts[sel], minlength=nvals)
    present = np.zeros(nvals, bool)
    present[ids[sel]] = True
    return sums, present


# ---- filters ----------------------------------------------------------------------------------
def spread_filter(t: NodeTable, p: Placement, affinity_ok: np.ndarray,
                  taints_ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(missing label, too much skew) per node for the pod's DoNotSchedule constraints."""
    n = t.n
    missing, skewed = np.zeros(n, bool), np.zeros(n, bool)
    hard = p.hard
    if not hard:
        return missing, skewed
    cols = [_column(t, c.topology_key) for c in hard]
    has_all = np.ones(n, bool)
    for ids, _ in cols:
        has_all &= ids >= 0
    for c, (ids, nvals) in zip(hard, cols, strict=True):
        eligible = has_all.copy()
        if c.honor_affinity:
            eligible &= affinity_ok
        if c.honor_taints:
            eligible &= taints_ok
        counts = matching_counts(t, (p.namespace,), c.selector)
        sums, present = _domain_sums(ids, nvals, counts, eligible)
        missing |= ids < 0
        if not present.any():
            continue
        domains = int(present.sum())
        min_match = 0 if domains < c.min_domains else int(sums[present].min())
        self_match = int(_selects(c.selector, p.labels))
        here = _at(sums, ids)
        skewed |= (ids >= 0) & (here + self_match - min_match > c.max_skew)
    return missing, skewed & ~missing


def affinity_filter(t: NodeTable, p: Placement) -> np.ndarray:
    """Nodes failing the pod's required pod affinity: every term needs a matching pod in the
    node's domain of its key. The first pod of a set that matches its own terms, while no pod
    anywhere does, may go to any node with all the keys (upstream's satisfyPodAffinity)."""
    n = t.n
    ok, has_all, any_match = np.ones(n, bool), np.ones(n, bool), False
    for term in p.affinity:
        ids, nvals = _column(t, term.topology_key)
        counts = matching_counts(t, term.namespaces, term.selector)
        sums, _ = _domain_sums(ids, nvals, counts, np.ones(n, bool))
        any_match = any_match or bool(counts[ids >= 0].any())
        has_all &= ids >= 0
        ok &= (ids >= 0) & (_at(sums, ids) > 0)
    if not any_match and all(term.selects(p.namespace, p.labels) for term in p.affinity):
        ok = has_all
    return ~ok


def anti_affinity_filter(t: NodeTable, p: Placement) -> tuple[np.ndarray, np.ndarray]:
    """(fails the pod's own anti-affinity, fails a bound pod's anti-affinity) per node."""
    n = t.n
    own, existing = np.zeros(n, bool), np.zeros(n, bool)
    for term in p.anti_affinity:
        ids, nvals = _column(t, term.topology_key)
        counts = matching_counts(t, term.namespaces, term.selector)
        sums, _ = _domain_sums(ids, nvals, counts, np.ones(n, bool))
        own |= (ids >= 0) & (_at(sums, ids) > 0)
    for held, holders in t.anti_counts.items():
        if not isinstance(held, PodTerm) or not held.selects(p.namespace, p.labels):
            continue
        ids, _ = _column(t, held.topology_key)
        domains = np.unique(ids[(holders[:n] > 0) & (ids >= 0)])
        if domains.size:
            existing |= np.isin(ids, domains)
    return own, existing & ~own


# ---- score ------------------------------------------------------------------------------------
def spread_score(t: NodeTable, p: Placement, feasible: np.ndarray,
                 affinity_ok: np.ndarray, taints_ok: np.ndarray) -> np.ndarray | None:
    """PodTopologySpread's normalised score (0..100) per node, or None when it does not apply."""
    soft = p.soft
    if not soft:
        return None
    n = t.n
    cols = [_column(t, c.topology_key) for c in soft]
    has_all = np.ones(n, bool)
    for ids, _ in cols:
        has_all &= ids >= 0
    scored = feasible & has_all if not p.system_default else feasible.copy()
    raw = np.zeros(n, np.float64)
    for c, (ids, nvals) in zip(soft, cols, strict=True):
        counts = matching_counts(t, (p.namespace,), c.selector)
        if c.topology_key == LABEL_HOSTNAME:
            here = counts.astype(np.float64)
            size = int(scored.sum())
        else:
            eligible = has_all.copy()
            if c.honor_affinity:
                eligible &= affinity_ok
            if c.honor_taints:
                eligible &= taints_ok
            sums, _ = _domain_sums(ids, nvals, counts, eligible)
            here = _at(sums, ids)
            _, present = _domain_sums(ids, nvals, counts, scored)
            size = int(present.sum())
        weight = math.log(size + 2)
        raw += np.where(ids >= 0, here * weight + (c.max_skew - 1), 0.0)
    raw = np.floor(raw + 0.5)  # Go's math.Round for non-negative values
    out = np.zeros(n, np.float64)
    if not scored.any():
        return out
    lo, hi = raw[scored].min(), raw[scored].max()
    if hi == 0:
        out[scored] = MAX_NODE_SCORE
    else:
        out[scored] = np.floor(MAX_NODE_SCORE * (hi + lo - raw[scored]) / hi)
    return out
