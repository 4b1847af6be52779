"""policy/v1 PodDisruptionBudget (stored object; the disruption controller that fills its status and
the pods/eviction subresource come later).

Validation follows ValidatePodDisruptionBudgetSpec: minAvailable or maxUnavailable, not both,
each a non-negative int or a percent up to 100%, a valid selector (an empty one selects every pod
of the namespace in policy/v1), and a known unhealthyPodEvictionPolicy. A new budget starts with
a zero status, as the strategy's PrepareForCreate leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.kinds.workloads import (
    int_or_percent_errors,
    is_int,
    percent_over_100,
    quoted,
    selector_errors,
    spec_dict,
    status_count_errors,
)
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")


class PodDisruptionBudgetStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", True,
        short_names=("pdb",), subresources=(Subresource("status", "PodDisruptionBudget", ("get", "patch", "update")),))
    has_status = True
    generation = True
    columns = (NAME, Column("Min Available", description="The minimum number of pods that must be available "
                                                         "simultaneously. This can be either an integer or a string "
                                                         "specifying a percentage, e.g. \"28%\"."),
               Column("Max Unavailable", description="The maximum number of pods that may be unavailable "
                                                     "simultaneously. This can be either an integer or a string "
                                                     "specifying a percentage, e.g. \"28%\"."),
               Column("Allowed Disruptions", type="integer", description="Number of pod disruptions that are "
                                                                         "currently allowed."), AGE)

    def initial_status(self, obj: Obj) -> Obj:
        return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def validate(self, obj: Obj) -> list[FieldError]:
        if obj.get("spec") is None:  # a value type upstream: an empty budget selects nothing yet
            return []
        spec, errs = spec_dict(obj)
        if spec is None:
            return errs
        min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
        if min_available is not None and max_unavailable is not None:
            errs.append(FieldError("spec", invalid(f"{{minAvailable: {min_available}, maxUnavailable: "
                                                   f"{max_unavailable}}}"[:120],
                                                   "minAvailable and maxUnavailable cannot be both set")))
        for name, value in (("minAvailable", min_available), ("maxUnavailable", max_unavailable)):
            errs += int_or_percent_errors(value, f"spec.{name}") or percent_over_100(value, f"spec.{name}")
        if spec.get("selector") is not None:
            errs += selector_errors(spec["selector"], "spec.selector")
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None and policy not in EVICTION_POLICIES:
            errs.append(FieldError("spec.unhealthyPodEvictionPolicy", f"Unsupported value: {quoted(policy)}: "
                                                                      'supported values: "AlwaysAllow", '
                                                                      '"IfHealthyBudget"'))
        return errs

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return status_count_errors(new.get("status"), ("observedGeneration", "disruptionsAllowed", "currentHealthy",
                                                       "desiredHealthy", "expectedPods"))

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        allowed = status.get("disruptionsAllowed")

        def shown(value: object) -> str:
            return "N/A" if value is None else str(value)

        return [obj["metadata"].get("name", ""), shown(spec.get("minAvailable")), shown(spec.get("maxUnavailable")),
                allowed if is_int(allowed) else 0, age(obj, now_wall)]
