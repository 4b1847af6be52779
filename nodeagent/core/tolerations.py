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


def toleration_matches(key: str | None, operator: str | None, value: str | None, effect: str | None,
                       taint_key: str | None, taint_value: str | None, taint_effect: str | None) -> bool:
    """The rule over plain fields (the control plane's controllers see raw API objects): an empty
    effect matches every effect, an empty key (with Exists) every key; Exists ignores the value,
    Equal (the default, also when unset) compares it, a missing value being ""; any other operator
    matches nothing."""
    if effect and effect != taint_effect:
        return False
    if key and key != taint_key:
        return False
    if operator == "Exists":
        return True
    if operator in ("Equal", "", None):
        return (value or "") == (taint_value or "")
    return False


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """`toleration_matches` on the parsed model."""
    return toleration_matches(toleration.key, toleration.operator, toleration.value, toleration.effect,
                              taint.key, taint.value, taint.effect)


def tolerated_by_any(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)
