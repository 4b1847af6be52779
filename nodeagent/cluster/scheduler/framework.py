"""Filter and score: which nodes can take a pod, and which of them is best (pure, vectorised).

Follows kube-scheduler's default profile for the plugins we have:
- Filter, in its plugin order, the first failing plugin giving a node's reason(s):
  NodeUnschedulable ("node(s) were unschedulable"), TaintToleration (NoSchedule/NoExecute taints,
  "node(s) had untolerated taint {key: value}", the first untolerated one in the node's order),
  NodeAffinity for nodeSelector and requiredDuringScheduling node affinity ("node(s) didn't
  match Pod's node affinity/selector"; nodeaffinity.py),
  NodeResourcesFit ("Too many pods", "Insufficient <resource>": every short resource counts),
  then PodTopologySpread (DoNotSchedule) and InterPodAffinity (required affinity, then required
  anti-affinity, the incoming pod's and the bound pods'), podspread.py.
  The taint wording is kube-scheduler's long-standing one; its newest releases print
  "node(s) had untolerated taint(s)". We keep the key because it tells operators which taint.
  NotReady and pressure conditions reach the filter as taints (see cluster.py).
  FitError's text is kube's FitError.Error(): "0/N nodes are available: " + the sorted
  "<count> <reason>" list + ".", then preemption's " preemption: 0/N nodes are available: ...".
- Score: NodeResourcesFit (LeastAllocated by default, MostAllocated as an option) over cpu and
  memory with weight 1 each, using "non-zero" requests (a container without a cpu/memory request
  counts 100m / 200Mi); plus NodeResourcesBalancedAllocation, (1 - std of the requested fractions)
  * 100 with the real requests, skipped for pods that request neither. Plugin weights 1 + 1.
  NodeAffinity's preferred terms and PodTopologySpread (ScheduleAnyway, or the system default
  constraints) add their 0..100 scores, normalised over the feasible nodes, with weight 2 each.
- Unlike kube-scheduler we score every feasible node (no percentageOfNodesToScore sampling): the
  vector operations make that cheap. Ties go to the lowest row (deterministic): rows follow insertion
  order, except that removing a node moves the last row into its place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nodeagent.cluster.scheduler import nodeaffinity, podspread
from nodeagent.cluster.scheduler import requests as scheduler_requests
from nodeagent.cluster.scheduler.node_table import (
    CPU,
    MEMORY,
    NO_EXECUTE,
    NO_SCHEDULE,
    PODS,
    PODS_COL,
    S_ALLOC_CPU,
    S_ALLOC_MEM,
    S_NZ_CPU,
    S_NZ_MEM,
    S_USED_CPU,
    S_USED_MEM,
    UNSCHEDULABLE,
    NodeTable,
    Taint,
    amount,
)
from nodeagent.core.errors import FieldError
from nodeagent.core.model import SYSTEM_CRITICAL_PRIORITY, Toleration
from nodeagent.core.qos import is_critical
from nodeagent.core.resources import combine_containers
from nodeagent.core.tolerations import tolerated_by_any as tolerated_by_any
from nodeagent.core.tolerations import tolerates as tolerates

assert (S_ALLOC_MEM, S_USED_MEM, S_NZ_MEM) == (S_ALLOC_CPU + 1, S_USED_CPU + 1, S_NZ_CPU + 1)

if TYPE_CHECKING:
    from nodeagent.core.model import Pod

DEFAULT_MILLI_CPU_REQUEST = 100  # kube-scheduler's non-zero defaults for scoring
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
MAX_NODE_SCORE = 100
PLUGIN_WEIGHT = 2  # NodeAffinity, PodTopologySpread and InterPodAffinity in the default profile
PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER = "PreemptLowerPriority", "Never"

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
NO_NODES_AVAILABLE = "no nodes available to schedule pods"


def insufficient(resource: str) -> str:
    return REASON_TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


def untolerated(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


@dataclass(eq=False)
class PodInfo:
    """A pending pod as the scheduler sees it: converted once, reused on every attempt.

    `requests` holds positive amounts in table units (cpu millicores, bytes, counts); the pod
    count (1) is implied. `nonzero_cpu`/`nonzero_memory` are the scoring requests.
    """

    key: str
    requests: Mapping[str, int] = field(default_factory=dict)
    priority: int = 0
    nonzero_cpu: int = DEFAULT_MILLI_CPU_REQUEST
    nonzero_memory: int = DEFAULT_MEMORY_REQUEST
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    critical: bool = False
    required_affinity: tuple[nodeaffinity.Term, ...] | None = None  # nodeSelectorTerms, ORed
    preferred_affinity: tuple[tuple[int, nodeaffinity.Term], ...] = ()
    placement: podspread.Placement | None = None  # labels, topology spread, pod anti-affinity

    def __post_init__(self) -> None:
        self.requests = {k: v for k, v in self.requests.items() if v > 0 and k != PODS}
        self.static_key = (tuple((t.key, t.operator, t.value, t.effect) for t in self.tolerations),
                           tuple(sorted(self.node_selector.items())), self.required_affinity)
        self.cpu = self.requests.get(CPU, 0)
        self.memory = self.requests.get(MEMORY, 0)
        self.score_delta = np.array([self.cpu, self.memory, self.nonzero_cpu,
                                     self.nonzero_memory], np.float64)
        self.request_vec = self.score_delta[:2, None]  # column vectors for the 2-row blocks
        self.nonzero_vec = self.score_delta[2:, None]
        self._table: NodeTable | None = None
        self._vector: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.intp), np.empty(0, np.int64))

    # What the node table reads to count a bound pod for topology spread and anti-affinity
    # (None: the pod is not counted; only pods converted with their object carry labels).
    @property
    def labels(self) -> Mapping[str, str] | None:
        return None if self.placement is None else self.placement.labels

    @property
    def namespace(self) -> str:
        return "" if self.placement is None else self.placement.namespace

    @property
    def anti_affinity(self) -> tuple[podspread.PodTerm, ...]:
        return () if self.placement is None else self.placement.anti_affinity

    @classmethod
    def from_pod(cls, pod: Pod, *, priority: int | None = None,
                 preemption_policy: str = PREEMPT_LOWER_PRIORITY,
                 obj: Mapping[str, Any] | None = None) -> PodInfo:
        """Convert a parsed Pod; `priority` overrides spec.priority (e.g. from a PriorityClass).
        `obj`, the stored object, adds what the model does not carry: node affinity, topology
        spread, pod anti-affinity, owner references."""
        requests_of = scheduler_requests.requests_of(pod, obj)  # max(desired, allocated, actual) in a resize
        requests = {name: amount(name, q) for name, q in combine_containers(pod, requests_of).items()}
        nz_cpu = nz_mem = 0
        for c in pod.spec.containers:
            own = requests_of(c)
            cpu, mem = own.get(CPU), own.get(MEMORY)
            nz_cpu += DEFAULT_MILLI_CPU_REQUEST if cpu is None else cpu.milli_value()
            nz_mem += DEFAULT_MEMORY_REQUEST if mem is None else mem.value()
        prio = pod.spec.priority if priority is None else priority
        spec = (obj or {}).get("spec") or {}
        return cls(key=pod.key, requests=requests, priority=prio, nonzero_cpu=nz_cpu,
                   nonzero_memory=nz_mem, tolerations=tuple(pod.spec.tolerations),
                   node_selector=dict(pod.spec.node_selector),
                   preemption_policy=preemption_policy,
                   critical=is_critical(pod) or prio >= SYSTEM_CRITICAL_PRIORITY,
                   required_affinity=nodeaffinity.required_terms(spec),
                   preferred_affinity=nodeaffinity.preferred_terms(spec),
                   placement=None if obj is None else podspread.placement_of(obj))

    def vector(self, table: NodeTable) -> tuple[np.ndarray, np.ndarray]:
        """(columns, amounts) of this pod's requests in `table`: its resources by column, then
        the pods column (always last, 1); cached per table."""
        if self._table is not table:
            items = sorted((table.resource_col(k), v) for k, v in self.requests.items())
            items.append((PODS_COL, 1))
            self._vector = (np.array([c for c, _ in items], np.intp),
                            np.array([v for _, v in items], np.int64))
            self._table = table
        return self._vector


@dataclass(frozen=True)
class ScoringConfig:
    strategy: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    fit_weight: int = 1
    balanced_weight: int = 1
    cpu_weight: int = 1
    memory_weight: int = 1

    def __post_init__(self) -> None:
        if self.strategy not in ("LeastAllocated", "MostAllocated"):
            raise FieldError("scoringStrategy.type", f"Unsupported value: {self.strategy!r}: "
                             "supported values: 'LeastAllocated', 'MostAllocated'")
        for name in ("fit_weight", "balanced_weight", "cpu_weight", "memory_weight"):
            if getattr(self, name) < 0:
                raise FieldError(name, "must be greater than or equal to 0")
        if self.cpu_weight + self.memory_weight == 0:
            raise FieldError("resources", "at least one resource needs a positive weight")


@dataclass(eq=False)
class StaticMasks:
    """Per-node verdicts that do not depend on requests; cached per (tolerations, selector)."""

    generation: int
    unschedulable: np.ndarray  # fails NodeUnschedulable
    taint: np.ndarray  # passes the above, fails TaintToleration
    first_taint: np.ndarray  # id of the first untolerated taint (meaningful where `taint`)
    selector: np.ndarray  # passes the above, fails the nodeSelector / required node affinity
    ok: np.ndarray  # passes all three
    matched: np.ndarray  # matches the nodeSelector and required node affinity (taints aside)


@dataclass(eq=False)
class Filtered:
    """The filter's verdict for one pod: `mask` marks feasible nodes; reasons on demand."""

    pod: PodInfo
    table: NodeTable
    static: StaticMasks
    mask: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    # PodTopologySpread and InterPodAffinity, checked after the resources: reason -> nodes (each
    # node under its first failing rule), and the nodes that pass them all.
    placement_fails: dict[str, np.ndarray] = field(default_factory=dict)
    placement_ok: np.ndarray | None = None

    def reasons(self) -> Counter[str]:
        """How many nodes failed for each reason (kube-scheduler's histogram)."""
        s, t = self.static, self.table
        out: Counter[str] = Counter()
        if n := int(s.unschedulable.sum()):
            out[REASON_UNSCHEDULABLE] = n
        if s.taint.any():
            ids, counts = np.unique(s.first_taint[s.taint], return_counts=True)
            for tid, count in zip(ids.tolist(), counts.tolist(), strict=False):
                out[untolerated(t.taints[tid])] += count
        if n := int(s.selector.sum()):
            out[REASON_NODE_SELECTOR] = n
        for col, val in zip(self.cols.tolist(), self.vals.tolist(), strict=False):
            if n := int((s.ok & (t.free[col, : t.n] < val)).sum()):
                out[insufficient(t.resources[col])] += n
        for reason, fails in self.placement_fails.items():
            if n := int(fails.sum()):
                out[reason] = n
        return out


class FitError(Exception):
    """No node can take the pod; str() is kube-scheduler's FailedScheduling message."""

    def __init__(self, pod: str, num_nodes: int, reasons: Mapping[str, int] | None = None,
                 post_filter: str = "", filtered: Filtered | None = None) -> None:
        self.pod, self.num_nodes = pod, num_nodes
        self._reasons = None if reasons is None else dict(reasons)
        self.post_filter, self.filtered = post_filter, filtered
        super().__init__(pod)

    def __str__(self) -> str:
        return self.message

    @property
    def reasons(self) -> dict[str, int]:
        """Reason -> node count, computed on first use from the table as it is then: read them
        (or str()) before changing the table. `preempt` does so before it returns."""
        if self._reasons is None:
            self._reasons = dict(self.filtered.reasons()) if self.filtered is not None else {}
        return self._reasons

    @property
    def message(self) -> str:
        if self.num_nodes == 0:
            return NO_NODES_AVAILABLE
        msg = f"0/{self.num_nodes} nodes are available:"
        histogram = sorted(f"{count} {reason}" for reason, count in self.reasons.items())
        if histogram:
            msg += " " + ", ".join(histogram) + "."
        if self.post_filter:
            msg += " " + self.post_filter
        return msg

    def with_post_filter(self, post_filter: str) -> FitError:
        return FitError(self.pod, self.num_nodes, self._reasons, post_filter, self.filtered)


@dataclass(frozen=True)
class Scheduled:
    node: str
    score: int


class Framework:
    """Filter + score over a NodeTable. Pure policy: it never binds; the caller does."""

    def __init__(self, table: NodeTable, config: ScoringConfig | None = None) -> None:
        self.table = table
        self.config = config or ScoringConfig()
        self._static: dict[tuple[object, ...], StaticMasks] = {}

    # ---- filter ------------------------------------------------------------------------------
    def static_masks(self, pod: PodInfo) -> StaticMasks:
        t = self.table
        cached = self._static.get(pod.static_key)
        if cached is not None and cached.generation == t.generation:
            return cached
        if len(self._static) > 256:
            self._static.clear()
        n = t.n
        unsched = t.unschedulable[:n] & (not tolerated_by_any(pod.tolerations, UNSCHEDULABLE))
        blocking = np.zeros(len(t.taints) + 1, bool)  # last slot: the -1 padding, never blocks
        for tid, known in enumerate(t.taints):
            if known.effect in (NO_SCHEDULE, NO_EXECUTE):
                blocking[tid] = not tolerated_by_any(pod.tolerations, known)
        hits = blocking[t.taint_ids[:, :n]]
        taint = hits.any(axis=0) & ~unsched
        first = t.taint_ids[:, :n][hits.argmax(axis=0), np.arange(n)]
        match = np.ones(n, bool)
        for key, value in pod.node_selector.items():
            vid = t.label_values.get(key, {}).get(value)
            if vid is None:
                match[:] = False
                break
            match &= t.labels[key][:n] == vid
        if pod.required_affinity is not None:
            match &= nodeaffinity.required_mask(t, pod.required_affinity)
        selector = ~match & ~unsched & ~taint
        ok = ~unsched & ~taint & match
        masks = StaticMasks(t.generation, unsched, taint, first, selector, ok, match)
        self._static[pod.static_key] = masks
        return masks

    def filter(self, pod: PodInfo) -> Filtered:
        t = self.table
        static = self.static_masks(pod)
        cols, vals = pod.vector(t)
        free, n = t.free, t.n
        mask = static.ok.copy()
        fits = np.empty(n, bool)
        for col, val in zip(cols.tolist(), vals.tolist(), strict=False):
            np.greater_equal(free[col, :n], val, out=fits)
            mask &= fits
        filtered = Filtered(pod, t, static, mask, cols, vals)
        p = pod.placement
        if p is not None and (p.hard or p.affinity or p.anti_affinity or t.anti_counts):
            self._placement_filter(filtered, p)
        return filtered

    def _placement_filter(self, f: Filtered, p: podspread.Placement) -> None:
        """PodTopologySpread then InterPodAffinity, over the nodes the earlier plugins pass."""
        s = f.static
        missing, skewed = podspread.spread_filter(self.table, p, s.matched, ~(s.unschedulable | s.taint))
        near = podspread.affinity_filter(self.table, p)
        own, existing = podspread.anti_affinity_filter(self.table, p)
        passed = f.mask.copy()
        ok = np.ones(self.table.n, bool)
        for reason, fails in ((podspread.REASON_SPREAD_LABEL, missing),
                              (podspread.REASON_SPREAD, skewed),
                              (podspread.REASON_AFFINITY, near),
                              (podspread.REASON_ANTI_AFFINITY, own),
                              (podspread.REASON_EXISTING_ANTI_AFFINITY, existing)):
            hit = fails & passed & ok
            if hit.any():
                f.placement_fails[reason] = hit
            ok &= ~fails
        f.placement_ok = ok
        f.mask &= ok

    # ---- score -------------------------------------------------------------------------------
    def score(self, pod: PodInfo) -> np.ndarray:
        """Every node's combined score (0..100 per plugin, times its weight), as float64."""
        return self._scores(pod).copy()

    def _scores(self, pod: PodInfo) -> np.ndarray:
        """score() in the table's scratch space (valid until the next call): cpu and memory are
        computed together as 2-row blocks, with no big temporaries."""
        t = self.table
        s = t.scoring[:, : t.n]
        alloc = s[S_ALLOC_CPU:S_ALLOC_MEM + 1]
        if t.zero_cpu_or_mem:
            with np.errstate(divide="ignore", invalid="ignore"):
                return self._combine(pod, s, alloc, slow=True)
        return self._combine(pod, s, alloc, slow=False)

    def _combine(self, pod: PodInfo, s: np.ndarray, alloc: np.ndarray, slow: bool) -> np.ndarray:
        cfg = self.config
        total = self._fit_score(pod, s, alloc, slow)
        if cfg.fit_weight != 1:
            total *= cfg.fit_weight
        if cfg.balanced_weight and (pod.cpu or pod.memory):
            bal = self._balanced_score(pod, s, alloc, slow)
            if cfg.balanced_weight != 1:
                bal *= cfg.balanced_weight
            total += bal
        return total

    def _fit_score(self, pod: PodInfo, s: np.ndarray, alloc: np.ndarray,
                   slow: bool) -> np.ndarray:
        cfg, t = self.config, self.table
        x = t.scratch("fit", 2, np.float64)  # requested (non-zero) incl. the pod
        np.add(s[S_NZ_CPU:S_NZ_MEM + 1], pod.nonzero_vec, out=x)
        if cfg.strategy == "LeastAllocated":  # (alloc - requested) * 100 / alloc, 0 if over
            np.subtract(alloc, x, out=x)
            x *= 100.0
            x /= alloc
            np.floor(x, out=x)
            np.maximum(x, 0.0, out=x)
        else:  # MostAllocated: min(requested, alloc) * 100 / alloc
            np.minimum(x, alloc, out=x)
            x *= 100.0
            x /= alloc
            np.floor(x, out=x)
        wc, wm = cfg.cpu_weight, cfg.memory_weight
        if slow:
            has = alloc > 0  # a resource the node lacks is left out of the average (kube)
            weights = wc * has[0] + wm * has[1]
            num = np.where(has[0], x[0] * wc, 0.0) + np.where(has[1], x[1] * wm, 0.0)
            return np.where(weights > 0, np.floor(num / weights), 0.0)
        out: np.ndarray = t.scratch("total", 1, np.float64)[0]
        if wc == wm == 1:
            np.add(x[0], x[1], out=out)
        else:
            np.multiply(x[0], wc, out=out)
            out += x[1] * wm
        out /= wc + wm
        np.floor(out, out=out)
        return out

    def _balanced_score(self, pod: PodInfo, s: np.ndarray, alloc: np.ndarray,
                        slow: bool) -> np.ndarray:
        t = self.table
        f = t.scratch("balanced", 2, np.float64)  # requested fractions, capped at 1
        np.add(s[S_USED_CPU:S_USED_MEM + 1], pod.request_vec, out=f)
        f /= alloc
        np.minimum(f, 1.0, out=f)
        std = np.subtract(f[0], f[1], out=t.scratch("std", 1, np.float64)[0])
        std /= 2.0  # std of two fractions: |f0 - f1| / 2
        np.abs(std, out=std)
        score: np.ndarray = np.subtract(1.0, std, out=std)
        score *= MAX_NODE_SCORE
        np.trunc(score, out=score)
        if slow:  # fewer than two fractions: std 0
            return np.where(alloc.all(axis=0), score, float(MAX_NODE_SCORE))
        return score

    def _placement_scores(self, pod: PodInfo, f: Filtered) -> np.ndarray:
        """NodeAffinity (preferred terms) and PodTopologySpread, each normalised to 0..100 over
        the feasible nodes and weighted 2, as in kube-scheduler's default profile."""
        t, mask = self.table, f.mask
        out = np.zeros(t.n, np.float64)
        if pod.preferred_affinity:
            raw = nodeaffinity.preferred_scores(t, pod.preferred_affinity)
            top = raw[mask].max() if mask.any() else 0.0
            if top > 0:  # DefaultNormalizeScore: 100 * score / max
                out += PLUGIN_WEIGHT * np.floor(MAX_NODE_SCORE * raw / top)
        p = pod.placement
        if p is not None:
            s = f.static
            spread = podspread.spread_score(t, p, mask, s.matched, ~(s.unschedulable | s.taint))
            if spread is not None:
                out += PLUGIN_WEIGHT * spread
        return out

    # ---- one scheduling cycle ----------------------------------------------------------------
    def schedule(self, pod: PodInfo) -> Scheduled | FitError:
        """The best feasible node, or a FitError with kube-scheduler's reasons (the Filtered
        verdict rides along for preemption). Binding is the caller's job."""
        t = self.table
        if t.n == 0:
            return FitError(pod.key, 0, {})
        filtered = self.filter(pod)
        mask = filtered.mask
        if not mask.any():
            return FitError(pod.key, t.n, filtered=filtered)
        scores = self._scores(pod)
        if pod.preferred_affinity or (pod.placement is not None and pod.placement.soft):
            scores = scores + self._placement_scores(pod, filtered)
        np.copyto(scores, -1.0, where=~mask)
        i = int(scores.argmax())
        return Scheduled(t.names[i], int(scores[i]))
