"""Taints and tolerations over plain dicts (core/v1 Toleration.ToleratesTaint, v1helper).

Controllers see raw API objects; the matching rule itself is core/tolerations.py's
`toleration_matches`, which `tolerates` applies to the dicts' fields. The taint keys are
core/wellknown.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeagent.core.tolerations import toleration_matches

Taint = Mapping[str, Any]
Toleration = Mapping[str, Any]


def tolerates(tol: Toleration, taint: Taint) -> bool:
    return toleration_matches(tol.get("key"), tol.get("operator"), tol.get("value"), tol.get("effect"),
                              taint.get("key"), taint.get("value"), taint.get("effect"))


def tolerated(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def untolerated(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], want: Callable[[Taint], bool]
) -> Taint | None:
    """FindMatchingUntoleratedTaint: the first taint passing `want` that nothing tolerates."""
    for taint in taints:
        if want(taint) and not tolerated(tolerations, taint):
            return taint
    return None


def matching_tolerations(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> tuple[bool, list[Toleration]]:
    """GetMatchingTolerations: are all taints tolerated, and by which (the first match each)."""
    used: list[Toleration] = []
    for taint in taints:
        for tol in tolerations:
            if tolerates(tol, taint):
                used.append(tol)
                break
        else:
            return False, []
    return True, used


def _identity(t: Toleration) -> tuple[str, str, str, str]:
    return (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")


def add_or_update_toleration(tolerations: Sequence[Toleration], tol: Toleration) -> list[dict[str, Any]]:
    """v1helper.AddOrUpdateTolerationInPodSpec: replace the toleration with the same key, operator,
    value and effect (MatchToleration), else append."""
    out: list[dict[str, Any]] = []
    found = False
    for t in tolerations:
        same = _identity(t) == _identity(tol)
        if same and not found:
            out.append(dict(tol))
            found = True
        else:
            out.append(dict(t))
    if not found:
        out.append(dict(tol))
    return out


def has_taint(taints: Sequence[Taint], key: str, effect: str) -> bool:
    return any(t.get("key") == key and t.get("effect") == effect for t in taints)
