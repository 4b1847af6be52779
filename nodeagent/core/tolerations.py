"""Taints and whether tolerations tolerate them: Kubernetes' Taint and Toleration.ToleratesTaint (pure).

The scheduler's taint filter and the agent's admission under memory pressure (BestEffort pods
that tolerate node.kubernetes.io/memory-pressure) ask the same question, so it is answered once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.core.errors import FieldError
from nodeagent.core.model import Toleration

NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __post_init__(self) -> None:
        if not self.key:
            raise FieldError("spec.taints.key", "Required value")
        if self.effect not in TAINT_EFFECTS:
            raise FieldError("spec.taints.effect", f"Unsupported value: {self.effect!r}: "
                             f"supported values: {', '.join(repr(e) for e in TAINT_EFFECTS)}")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """An empty effect matches every effect, an empty key (with Exists) every key; Exists ignores
    the value, Equal (the default) compares it, a missing value being ""."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.value or "") == taint.value


def tolerated_by_any(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)
