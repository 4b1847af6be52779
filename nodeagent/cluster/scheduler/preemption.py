"""Preemption: when a pod fits nowhere, which lower-priority pods to evict, and on which node.

kube-scheduler's DefaultPreemption (PostFilter), with its rules:
- Nodes that fail for reasons eviction cannot fix (cordoned, untolerated taints, nodeSelector;
  NotReady and pressure arrive as taints) are skipped: "Preemption is not helpful for scheduling".
- Victims have strictly lower priority than the pod and are never critical (priority >=
  2000000000, static or mirror pods). A pod with preemptionPolicy Never preempts nothing.
- Victims on a node (SelectVictimsOnNode): remove every lower-priority pod; if the pod still does
  not fit, the node is out; else add them back ("reprieve") from the most important down (higher
  priority, then earlier start), keeping each one with which the pod still fits.
- PodDisruptionBudgets (filterPodsWithPDBViolation): walking the potential victims most important
  first, each budget selecting a pod (same namespace, a non-empty selector, the pod not already in
  its disruptedPods) loses one allowed disruption; a pod that takes a budget below 0 violates it.
  The reprieve tries the violating pods first, then the others, so a pod whose eviction the
  budgets allow is preferred as a victim; violating victims are counted.
- Choice of node (pickOneNodeForPreemption): 1 fewest PodDisruptionBudget violations, 2 the lowest
  priority of the most important victim, 3 the smallest sum of victim priorities (each plus 2^31
  so negative ones count), 4 the fewest victims, 5 the latest start of the most important victims,
  6 the first node.

Speed (5000 nodes full of low-priority pods): rule 2 is computed for every node at once. The table
keeps each priority level's summed requests as arrays, so walking the levels below the pod's in
ascending order, "free + everything up to this level" says where the pod first fits; that level
is exactly the highest victim priority the reprieve ends with (pods above it all fit back). Rules
3-5 need the real victims, a Python loop per node, so they are decided among at most
`max_candidates` nodes of that level: those with the fewest expected victims (shortfall over the
average size of the removable pods). kube-scheduler likewise dry-runs a sample of the nodes
(max(100, 10%), from a random offset), so both are exact on rule 2 only where they looked; we look
at every node for it. Rule 1 comes first upstream: when every candidate of that level would
violate a budget, every node is weighed one by one on all six rules (exact, slower; only then).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeagent.cluster.scheduler.framework import PREEMPT_NEVER, FitError, PodInfo, insufficient
from nodeagent.cluster.scheduler.node_table import PODS_COL, BoundPod, NodeTable, importance
from nodeagent.cluster.scheduler.podspread import label_selector
from nodeagent.core.selectors import LabelSelector

PRIORITY_OFFSET = 2**31  # math.MaxInt32 + 1, added to every victim's priority in rule 3
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
DEFAULT_MAX_CANDIDATES = 16


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption weighs it: its namespace, selector (None or empty
    selects nothing here), disruptionsAllowed and the pods already in its disruptedPods."""

    namespace: str
    selector: LabelSelector | None
    allowed: int
    disrupted: frozenset[str] = frozenset()

    @classmethod
    def of(cls, pdb: Mapping[str, Any]) -> Budget:
        meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        return cls(str(meta.get("namespace") or ""), label_selector(spec.get("selector")),
                   allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
                   frozenset(status.get("disruptedPods") or ()))


@dataclass(frozen=True)
class Preemption:
    """Evict `victims` (most important first) from `node`, then the pod fits there."""

    node: str
    victims: tuple[BoundPod, ...]


def preempt(table: NodeTable, pod: PodInfo, failure: FitError, max_candidates: int = DEFAULT_MAX_CANDIDATES,
            budgets: Sequence[Budget] = ()) -> Preemption | FitError:
    """Pick a node and victims for `pod`, which `failure` (from Framework.schedule, on the table
    as it still is) says fits nowhere; or return `failure` with kube's "preemption: ..."
    explanation added. The caller evicts the victims and binds (or nominates) the pod.
    `budgets`: the cluster's PodDisruptionBudgets (rule 1 and the reprieve order)."""
    filtered = failure.filtered
    if filtered is None or table.n == 0:
        return failure
    _ = failure.reasons  # computed now, before the caller evicts anything
    if pod.preemption_policy == PREEMPT_NEVER:
        return failure.with_post_filter(f"preemption: {NOT_ELIGIBLE_NEVER}")
    base = filtered.static.ok  # a node failing spread or anti-affinity is no candidate here
    if filtered.placement_ok is not None:
        base = base & filtered.placement_ok
    cols, vals = filtered.cols, filtered.vals
    rows = len(cols)
    need = vals[:, None]
    base_free = _gather(table.free, cols, table.scratch("free", rows))
    cum = table.scratch("cum", rows)  # free + requests of the pods removed so far
    np.copyto(cum, base_free)
    level_rows, fits = table.scratch("level", rows), table.scratch("fits", rows, bool)
    for level in sorted(p for p in table.levels if p < pod.priority):
        cum += _gather(table.levels[level], cols, level_rows)
        tier = np.greater_equal(cum, need, out=fits).all(axis=0)
        tier &= base
        if tier.any():
            break
    else:
        return failure.with_post_filter(_explain(table, filtered.static.ok, cum, cols, vals))
    chosen = _most_promising(table, base_free, cum, vals, tier, max_candidates)
    room = cum[:, chosen]  # free once every lower-priority pod is gone, for the chosen rows
    for above in (p for p in table.levels if level < p < pod.priority):
        room += table.levels[above][np.ix_(cols, chosen)]
    col_list, val_list = cols.tolist(), vals.tolist()
    best: tuple[tuple[int, ...], int, list[BoundPod]] | None = None
    for i, node_room in zip(chosen.tolist(), room.T.tolist(), strict=False):
        victims, violations = _reprieve(table, i, pod.priority, col_list, val_list, node_room, budgets)
        if not victims:
            return Preemption(table.names[i], ())
        key = _rank(victims, violations, i)
        if best is None or key < best[0]:
            best = (key, i, victims)
    assert best is not None  # `chosen` is never empty: the tier has a row
    if best[0][0] > 0:  # every candidate violates a budget: weigh every node on all the rules
        for i in np.flatnonzero(base).tolist():
            found = _select(table, i, pod.priority, col_list, val_list, budgets)
            if found is not None and found[0] and (key := _rank(found[0], found[1], i)) < best[0]:
                best = (key, i, found[0])
    return Preemption(table.names[best[1]], tuple(best[2]))


def _rank(victims: list[BoundPod], violations: int, i: int) -> tuple[int, ...]:
    """pickOneNodeForPreemption's order as a key (smallest wins)."""
    top = victims[0].priority
    return (violations, top, sum(v.priority + PRIORITY_OFFSET for v in victims), len(victims),
            -min(v.seq for v in victims if v.priority == top), i)


def select_victims(table: NodeTable, i: int, priority: int, cols: list[int], vals: list[int],
                   budgets: Sequence[Budget] = ()) -> list[BoundPod] | None:
    """kube's SelectVictimsOnNode for row `i`: the victims, most important first, or None when
    removing every lower-priority pod is not enough."""
    found = _select(table, i, priority, cols, vals, budgets)
    return None if found is None else found[0]


def _select(table: NodeTable, i: int, priority: int, cols: list[int], vals: list[int],
            budgets: Sequence[Budget]) -> tuple[list[BoundPod], int] | None:
    room = [int(table.free[c, i]) for c in cols]
    for bp in table.pods[i].values():
        if bp.priority < priority and not bp.critical:
            for j, c in enumerate(cols):
                room[j] += bp.requests.get(c, 0)
    if any(r < v for r, v in zip(room, vals, strict=False)):
        return None
    return _reprieve(table, i, priority, cols, vals, room, budgets)


def violating(table: NodeTable, pods: Sequence[BoundPod], budgets: Sequence[Budget]) -> set[str]:
    """filterPodsWithPDBViolation: the keys of the pods (most important first) whose eviction
    would take a budget below zero."""
    allowed = [b.allowed for b in budgets]
    out: set[str] = set()
    for bp in pods:
        if bp.label_set < 0:
            continue
        namespace, labels = table.set_labels[bp.label_set]
        if not labels:
            continue  # a pod without labels matches no budget
        name = bp.key.split("/", 1)[-1]
        for j, b in enumerate(budgets):
            if (b.namespace != namespace or b.selector is None or b.selector.empty
                    or not b.selector.matches(labels) or name in b.disrupted):
                continue
            allowed[j] -= 1
            if allowed[j] < 0:
                out.add(bp.key)
    return out


def _reprieve(table: NodeTable, i: int, priority: int, cols: list[int], vals: list[int],
              room: list[int], budgets: Sequence[Budget] = ()) -> tuple[list[BoundPod], int]:
    """Add the lower-priority pods back while the pod still fits, those violating a budget first
    and then the others, each most important first; `room` is what is free with all of them gone
    (enough for the pod). The victims (most important first) and how many violate a budget."""
    need = [[c, v, r] for c, v, r in zip(cols, vals, room, strict=False)]
    potential = [bp for bp in table.order[i] if bp.priority < priority and not bp.critical]
    bad = violating(table, potential, budgets) if budgets else set()
    if bad:
        potential = [bp for bp in potential if bp.key in bad] + [bp for bp in potential if bp.key not in bad]
    victims = []
    for bp in potential:
        req = bp.requests
        for item in need:
            if item[2] - req.get(item[0], 0) < item[1]:
                victims.append(bp)
                break
        else:
            for item in need:
                item[2] -= req.get(item[0], 0)
    if bad:
        victims.sort(key=importance)
    return victims, sum(1 for v in victims if v.key in bad)


def _gather(matrix: np.ndarray, cols: np.ndarray, out: np.ndarray) -> np.ndarray:
    """matrix[cols, :n] into `out` (n = out's width) without a temporary."""
    for j, col in enumerate(cols.tolist()):
        out[j] = matrix[col, : out.shape[1]]
    return out


def _most_promising(table: NodeTable, base_free: np.ndarray, cum: np.ndarray, vals: np.ndarray,
                    tier: np.ndarray, k: int) -> np.ndarray:
    """Up to k rows of `tier` (a mask), fewest expected victims first, ties to the lowest row.
    Expected victims: per resource, the shortfall over the average request of the pods that may
    go (removable / count), the worst resource counting. The last row is the pod count."""
    rows = np.flatnonzero(tier)
    if rows.size <= k:
        return rows
    n, r = cum.shape[1], cum.shape[0] - 1
    expected = table.scratch("expected", 1, np.float64)[0]
    if r == 0:  # the pod requests nothing but a pod slot
        expected[:] = 0.0
    else:
        res = base_free[:-1]
        removable = np.subtract(cum[:-1], res, out=table.scratch("removable", r))
        removable += 1  # > 0; rows where it was 0 need nothing or are not in the tier
        short = np.subtract(vals[:-1, None], res, out=table.scratch("short", r))
        np.maximum(short, 0, out=short)
        ratio = np.divide(short, removable, out=table.scratch("ratio", r, np.float64))
        np.max(ratio, axis=0, out=expected)
        expected *= cum[-1] - base_free[-1]  # pods at or below the chosen level
        np.ceil(expected, out=expected)
        expected *= n
    expected += np.arange(n)  # ties: lowest row
    np.copyto(expected, np.inf, where=~tier)
    return np.sort(np.argpartition(expected, k - 1)[:k])


def _explain(table: NodeTable, base: np.ndarray, cum: np.ndarray, cols: np.ndarray,
             vals: np.ndarray) -> str:
    """kube's "preemption: 0/N nodes are available: ..." when no node can be helped."""
    n = table.n
    reasons: Counter[str] = Counter()
    reasons[NOT_HELPFUL] = int((~base).sum())
    has_victims = cum[-1] > table.free[PODS_COL, :n]  # the last row counts pods
    reasons[NO_VICTIMS] = int((base & ~has_victims).sum())
    for row, (col, val) in enumerate(zip(cols.tolist(), vals.tolist(), strict=False)):
        reasons[insufficient(table.resources[col])] += int(
            (base & has_victims & (cum[row] < val)).sum())
    histogram = sorted(f"{c} {r}" for r, c in reasons.items() if c)
    return f"preemption: 0/{n} nodes are available: {', '.join(histogram)}."
