"""Pod predicates and the orderings controllers share (pkg/api/v1/pod, pkg/controller/controller_utils.go).

- ready: the Ready condition is True; available: ready and (minReadySeconds == 0 or the Ready
  condition's lastTransitionTime + minReadySeconds < now);
- active (FilterActivePods): not Succeeded/Failed and not being deleted;
- `active_pods_key`: controller.ActivePods' order (the pods to delete first come first);
- `ranked_less`: ActivePodsWithRanks.Less with LogarithmicScaleDown (GA 1.31) and pod deletion cost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import cmp_to_key
from typing import Any

from nodeagent.cluster.controllers.common.meta import (
    annotations_of,
    being_deleted,
    creation_time,
    parse_time,
    spec,
    status,
    uid,
)

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT_RE = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 32)


def phase(pod: Mapping[str, Any]) -> str:
    return str(status(pod).get("phase") or "")


def node_name(pod: Mapping[str, Any]) -> str:
    return str(spec(pod).get("nodeName") or "")


def condition(pod: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in status(pod).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    c = condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def ready_time(pod: Mapping[str, Any]) -> float | None:
    """podReadyTime: the Ready condition's lastTransitionTime while ready, else the zero time."""
    c = condition(pod, "Ready")
    if c is None or c.get("status") != "True":
        return None
    return parse_time(c.get("lastTransitionTime"))


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: float) -> bool:
    """podutil.IsPodAvailable."""
    if not is_ready(pod):
        return False
    if min_ready_seconds == 0:
        return True
    t = ready_time(pod)
    return t is not None and t + min_ready_seconds < now


def available_at(pod: Mapping[str, Any], min_ready_seconds: int) -> float | None:
    """When a ready pod becomes available (for a requeue), None if it is not ready."""
    t = ready_time(pod)
    return None if t is None else t + min_ready_seconds


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def is_active(pod: Mapping[str, Any]) -> bool:
    """controller.IsPodActive."""
    return not is_terminal(pod) and not being_deleted(pod)


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """controller.IsPodTerminating: being deleted and not yet terminal."""
    return being_deleted(pod) and not is_terminal(pod)


def max_restarts(pod: Mapping[str, Any]) -> int:
    return max(
        (int(c.get("restartCount") or 0) for c in status(pod).get("containerStatuses") or [] if isinstance(c, Mapping)),
        default=0,
    )


def deletion_cost(pod: Mapping[str, Any]) -> int:
    """helper.GetDeletionCostFromPodAnnotations: an int32, 0 when absent or invalid."""
    text = annotations_of(pod).get(DELETION_COST_ANNOTATION)
    if not isinstance(text, str) or not _INT_RE.fullmatch(text):
        return 0
    v = int(text)
    return v if _INT32_MIN <= v <= _INT32_MAX else 0


def _after_or_zero(t1: float | None, t2: float | None) -> bool:
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def _log_rank(t: float, now: float) -> int:
    d = now - t
    return int(math.log2(d * 1e9)) if d > 0 else -1  # Go compares log2 of a Duration in ns


def _cmp_time(t1: float | None, t2: float | None, u1: str, u2: str, now: float | None) -> int | None:
    """Rules 6 and 8 with LogarithmicScaleDown: -1/0/1 when they decide, None when the times are equal."""
    if t1 == t2:
        return None
    if now is None or t1 is None or t2 is None:
        return -1 if _after_or_zero(t1, t2) else 1
    diff = _log_rank(t1, now) - _log_rank(t2, now)
    if diff == 0:  # Less returns uid_i < uid_j here and looks no further
        return 0 if u1 == u2 else -1 if u1 < u2 else 1
    return -1 if diff < 0 else 1


def ranked_cmp(a: tuple[Mapping[str, Any], int], b: tuple[Mapping[str, Any], int], now: float | None) -> int:
    """ActivePodsWithRanks.Less as a comparator (-1: a is deleted first). `now` None: no
    logarithmic scaling (metav1.Time zero in upstream)."""
    pa, ra = a
    pb, rb = b
    na, nb = node_name(pa), node_name(pb)
    if na != nb and (not na or not nb):
        return -1 if not na else 1
    oa, ob = _PHASE_ORDINAL.get(phase(pa), 0), _PHASE_ORDINAL.get(phase(pb), 0)
    if oa != ob:
        return -1 if oa < ob else 1
    rda, rdb = is_ready(pa), is_ready(pb)
    if rda != rdb:
        return -1 if not rda else 1
    ca, cb = deletion_cost(pa), deletion_cost(pb)
    if ca != cb:
        return -1 if ca < cb else 1
    if ra != rb:
        return -1 if ra > rb else 1
    if rda and rdb:
        r = _cmp_time(ready_time(pa), ready_time(pb), uid(pa), uid(pb), now)
        if r is not None:
            return r
    xa, xb = max_restarts(pa), max_restarts(pb)
    if xa != xb:
        return -1 if xa > xb else 1
    r = _cmp_time(creation_time(pa), creation_time(pb), uid(pa), uid(pb), now)
    return 0 if r is None else r


def sort_ranked(pods: Sequence[Mapping[str, Any]], ranks: Sequence[int], now: float | None) -> list[Mapping[str, Any]]:
    """The pods in deletion order (stable for ties, where Go's sort.Sort is not: ties are equal
    for every rule, so any order is upstream's)."""

    def cmp(a: tuple[Mapping[str, Any], int], b: tuple[Mapping[str, Any], int]) -> int:
        return ranked_cmp(a, b, now)

    pairs = sorted(zip(pods, ranks, strict=True), key=cmp_to_key(cmp))
    return [p for p, _ in pairs]


def active_pods_cmp(pa: Mapping[str, Any], pb: Mapping[str, Any]) -> int:
    """controller.ActivePods.Less (Jobs, DaemonSets): no ranks, no deletion cost, no log scale."""
    na, nb = node_name(pa), node_name(pb)
    if na != nb and (not na or not nb):
        return -1 if not na else 1
    oa, ob = _PHASE_ORDINAL.get(phase(pa), 0), _PHASE_ORDINAL.get(phase(pb), 0)
    if oa != ob:
        return -1 if oa < ob else 1
    rda, rdb = is_ready(pa), is_ready(pb)
    if rda != rdb:
        return -1 if not rda else 1
    if rda and rdb:
        t1, t2 = ready_time(pa), ready_time(pb)
        if t1 != t2:
            return -1 if _after_or_zero(t1, t2) else 1
    xa, xb = max_restarts(pa), max_restarts(pb)
    if xa != xb:
        return -1 if xa > xb else 1
    c1, c2 = creation_time(pa), creation_time(pb)
    if c1 != c2:
        return -1 if _after_or_zero(c1, c2) else 1
    return 0


def sort_active(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(pods, key=cmp_to_key(active_pods_cmp))
