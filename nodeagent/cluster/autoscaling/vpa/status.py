"""A VPA's status as the recommender writes it: the recommendation and the conditions.

As vertical-pod-autoscaler/pkg/recommender/model/vpa.go (updateConditionsLocked, AsStatus):
NoPodsMatched is True ("No pods match this VPA object") while no pod matches and absent otherwise;
RecommendationProvided is True while the recommendation lists a container, else False with the
NoPodsMatched reason when that is why; a condition keeps its lastTransitionTime until its status
changes; observedGeneration is the VPA's generation. `extra` adds conditions of our own (the
ConfigUnsupported of coexist). Conditions are listed by type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.core.timefmt import rfc3339

NO_PODS_MATCHED = "NoPodsMatched"
RECOMMENDATION_PROVIDED = "RecommendationProvided"


def vpa_status(
    recommendation: Mapping[str, Any] | None,
    pods_matched: bool,
    now: float,
    *,
    generation: int = 0,
    previous: Sequence[Mapping[str, Any]] = (),
    extra: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    before = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    conditions: dict[str, dict[str, Any]] = {}

    def put(kind: str, status: bool, reason: str = "", message: str = "") -> None:
        text = "True" if status else "False"
        old = before.get(kind)
        cond: dict[str, Any] = {"type": kind, "status": text}
        cond["lastTransitionTime"] = (
            old.get("lastTransitionTime") if old and old.get("status") == text else rfc3339(now)
        )
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        conditions[kind] = cond

    reason = message = ""
    if not pods_matched:
        reason, message = NO_PODS_MATCHED, "No pods match this VPA object"
        put(NO_PODS_MATCHED, True, reason, message)
    items = (recommendation or {}).get("containerRecommendations")
    if isinstance(items, list) and items:
        put(RECOMMENDATION_PROVIDED, True)
    else:
        put(RECOMMENDATION_PROVIDED, False, reason, message)
    for c in extra:
        put(str(c["type"]), c.get("status") == "True", c.get("reason", ""), c.get("message", ""))
    status: dict[str, Any] = {
        "conditions": [conditions[k] for k in sorted(conditions)],
        "observedGeneration": generation,
    }
    if isinstance(items, list) and items:
        status["recommendation"] = dict(recommendation or {})
    return status
