"""The pods/eviction decision (EvictionREST.Create): whether a pod may be deleted now, and the PDB
status write that must commit first (disruptionsAllowed - 1 and the pod in disruptedPods).

Two steps, as upstream: `decide` (a terminal, pending or terminating pod is deleted without a
budget; more than one budget is a 500; an unready pod may go without spending the budget), then
`check_and_decrement` on the budget as read, which the caller writes with a compare-and-swap and
re-runs on a fresh read when it loses the race.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.controllers.common import conditions
from nodeagent.cluster.controllers.common.meta import being_deleted, format_time, generation, name, status
from nodeagent.cluster.controllers.common.pods import is_ready, phase
from nodeagent.cluster.controllers.disruption.status import disruption_allowed_condition, matching_pods

MAX_DISRUPTED_POD_SIZE = 2000
DENIED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                     "message": "Eviction API: evicting"}


class Denied(Exception):
    """The eviction is refused; `status` is the metav1.Status to answer."""

    def __init__(self, status_: dict[str, Any]) -> None:
        super().__init__(status_["message"])
        self.status = status_


@dataclass(frozen=True, slots=True)
class EvictionVerdict:
    """`budget`: the one PDB to spend (check_and_decrement) before deleting; `status`: a Status to
    answer instead of deleting (the 500 of several budgets); `precondition`: delete with the pod's
    resourceVersion, so a pod that became ready since the decision is not deleted (409 -> 429)."""

    status: dict[str, Any] | None = None
    budget: Mapping[str, Any] | None = None
    precondition: bool = False
    ignored_budget: bool = False  # canIgnorePDB: terminal, pending or terminating
    budget_name: str = ""  # the budget that guards the pod (named in a 429)


def too_many_requests(message: str, retry_after: int = 0) -> dict[str, Any]:
    """errors.NewTooManyRequests plus the DisruptionBudget cause (details carry no name or kind)."""
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": DENIED,
            "reason": "TooManyRequests", "details": details, "code": 429}


def still_processing(pdb_name: str) -> dict[str, Any]:
    """createTooManyRequestsError: the budget's status is older than its spec (retry in 10 s)."""
    return too_many_requests(f"The disruption budget {pdb_name} is still being processed by the server.", 10)


def _forbidden(pdb_name: str, why: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'poddisruptionbudget.policy "{pdb_name}" is forbidden: {why}', "reason": "Forbidden",
            "details": {"name": pdb_name, "group": "policy", "kind": "poddisruptionbudget",
                        "causes": [{"reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb_name} does not allow evicting pods "
                                               f"currently: {why}"}]},
            "code": 403}


def denied_message(pdb: Mapping[str, Any]) -> str:
    """disruptionDeniedMessage: sync failures first (their counts are not to be trusted)."""
    st = status(pdb)
    cond = conditions.find(st.get("conditions"), "DisruptionAllowed")
    failed = cond is not None and cond.get("status") == "False" and bool(cond.get("message"))
    if failed and cond is not None and cond.get("reason") == "SyncFailed":
        return (f"The disruption budget {name(pdb)} does not allow evicting pods currently because it failed sync: "
                f"{cond['message']}")
    if int(st.get("currentHealthy") or 0) <= int(st.get("desiredHealthy") or 0):
        return (f"The disruption budget {name(pdb)} needs {int(st.get('desiredHealthy') or 0)} healthy pods and has "
                f"{int(st.get('currentHealthy') or 0)} currently")
    if failed and cond is not None:
        return (f"The disruption budget {name(pdb)} does not allow evicting pods currently ({cond.get('reason')}): "
                f"{cond['message']}")
    return f"The disruption budget {name(pdb)} does not allow evicting pods currently"


def can_ignore_budget(pod: Mapping[str, Any]) -> bool:
    """canIgnorePDB: a terminal or pending pod, or one already being deleted, disrupts nothing more."""
    return phase(pod) in ("Succeeded", "Failed", "Pending") or being_deleted(pod)


def enforce_resource_version(pod: Mapping[str, Any]) -> bool:
    """shouldEnforceResourceVersion: all but terminal and terminating pods may turn ready meanwhile."""
    return not (phase(pod) in ("Succeeded", "Failed") or being_deleted(pod))


def decide(pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]]) -> EvictionVerdict:
    """What to do with the pod given the budgets of its namespace (the caller lists them)."""
    if can_ignore_budget(pod):
        return EvictionVerdict(precondition=enforce_resource_version(pod), ignored_budget=True)
    matching = [b for b in pdbs if matching_pods(b, [pod])]
    if len(matching) > 1:
        return EvictionVerdict(status={"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": MULTIPLE, "code": 500})
    if not matching:
        return EvictionVerdict()
    pdb = matching[0]
    st = status(pdb)
    if not is_ready(pod):
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return EvictionVerdict(precondition=True, budget_name=name(pdb))  # it counts in neither total
        desired = int(st.get("desiredHealthy") or 0)
        if int(st.get("currentHealthy") or 0) >= desired > 0:
            return EvictionVerdict(precondition=True, budget_name=name(pdb))  # the application is whole
    return EvictionVerdict(budget=pdb, budget_name=name(pdb))


def check_and_decrement(pdb: Mapping[str, Any], pod_name: str, *, now: float, dry_run: bool = False
                        ) -> dict[str, Any]:
    """The budget to write (status: one disruption fewer, the pod in disruptedPods); raises Denied."""
    st = status(pdb)
    if int(st.get("observedGeneration") or 0) < generation(pdb):
        raise Denied(still_processing(name(pdb)))
    allowed = int(st.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise Denied(_forbidden(name(pdb), "pdb disruptions allowed is negative"))
    if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise Denied(_forbidden(name(pdb), "DisruptedPods map too big - too many evictions not confirmed by PDB "
                                           "controller"))
    if allowed == 0:
        raise Denied(too_many_requests(denied_message(pdb)))
    new = copy.deepcopy(dict(pdb))
    nst = new.setdefault("status", {})
    nst["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        nst["conditions"] = disruption_allowed_condition(nst, now)
    if not dry_run:
        nst["disruptedPods"] = {**(nst.get("disruptedPods") or {}), pod_name: format_time(now)}
    return new


def with_disruption_target(pod: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The pod with DisruptionTarget=True (EvictionByEvictionAPI), written before the delete."""
    new = copy.deepcopy(dict(pod))
    st = new.setdefault("status", {})
    conds = [dict(c) for c in st.get("conditions") or []]
    for c in conds:
        if c.get("type") == "DisruptionTarget":
            if c.get("status") != "True":
                c["lastTransitionTime"] = format_time(now)
            c.update(DISRUPTION_TARGET)
            break
    else:
        conds.append({**DISRUPTION_TARGET, "lastProbeTime": None, "lastTransitionTime": format_time(now)})
    st["conditions"] = conds
    return new
