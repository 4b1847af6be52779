"""The pods/eviction decision (EvictionREST.Create): whether a pod may be deleted now, and the PDB
status write that must commit first (disruptionsAllowed - 1 and the pod in disruptedPods)."""

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


@dataclass(frozen=True, slots=True)
class EvictionVerdict:
    allowed: bool
    status: dict[str, Any] | None = None  # metav1.Status to answer when not allowed
    pdb_update: dict[str, Any] | None = None  # the PDB (with its resourceVersion) to write before deleting
    disruption_target: bool = True  # add DisruptionTarget (EvictionByEvictionAPI) to the pod


def _status(
    code: int, reason: str, message: str, name_: str, causes: Sequence[Mapping[str, str]] = (), retry: int = 0
) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name_, "group": "policy", "kind": "poddisruptionbudget"}
    if causes:
        details["causes"] = list(causes)
    if retry:
        details["retryAfterSeconds"] = retry
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def denied_message(pdb: Mapping[str, Any]) -> str:
    st = status(pdb)
    cond = conditions.find(st.get("conditions"), "DisruptionAllowed")
    if (
        cond is not None
        and cond.get("status") == "False"
        and cond.get("message")
        and cond.get("reason") == "SyncFailed"
    ):
        return f"The disruption budget {name(pdb)} does not allow evicting pods currently because it failed sync: {cond['message']}"  # noqa: E501  (upstream's text)
    if int(st.get("currentHealthy") or 0) <= int(st.get("desiredHealthy") or 0):
        return f"The disruption budget {name(pdb)} needs {int(st.get('desiredHealthy') or 0)} healthy pods and has {int(st.get('currentHealthy') or 0)} currently"  # noqa: E501  (upstream's text)
    if cond is not None and cond.get("status") == "False" and cond.get("message"):
        return f"The disruption budget {name(pdb)} does not allow evicting pods currently ({cond.get('reason')}): {cond['message']}"  # noqa: E501  (upstream's text)
    return f"The disruption budget {name(pdb)} does not allow evicting pods currently"


def decide(
    pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]], *, now: float, dry_run: bool = False
) -> EvictionVerdict:
    if phase(pod) in ("Succeeded", "Failed", "Pending") or being_deleted(pod):
        return EvictionVerdict(True, disruption_target=phase(pod) not in ("Succeeded", "Failed"))
    matching = [b for b in pdbs if matching_pods(b, [pod])]
    if len(matching) > 1:
        return EvictionVerdict(
            False,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "code": 500,
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",  # noqa: E501  (upstream's text)
            },
        )
    if not matching:
        return EvictionVerdict(True)
    pdb = matching[0]
    st = status(pdb)
    if not is_ready(pod):
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return EvictionVerdict(True)
        if (
            int(st.get("currentHealthy") or 0) >= int(st.get("desiredHealthy") or 0)
            and int(st.get("desiredHealthy") or 0) > 0
        ):
            return EvictionVerdict(True)
    if int(st.get("observedGeneration") or 0) < generation(pdb):
        return EvictionVerdict(
            False,
            _status(
                429,
                "TooManyRequests",
                DENIED,
                name(pdb),
                [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {name(pdb)} is still being processed by the server.",
                    }
                ],
                10,
            ),
        )
    allowed = int(st.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return EvictionVerdict(
            False,
            _status(
                403,
                "Forbidden",
                f'poddisruptionbudget.policy "{name(pdb)}" is forbidden: pdb disruptions allowed is negative',
                name(pdb),
            ),
        )
    if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        return EvictionVerdict(
            False,
            _status(
                403,
                "Forbidden",
                f'poddisruptionbudget.policy "{name(pdb)}" is forbidden: '
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                name(pdb),
            ),
        )
    if allowed == 0:
        return EvictionVerdict(
            False,
            _status(
                429,
                "TooManyRequests",
                DENIED,
                name(pdb),
                [{"reason": "DisruptionBudget", "message": denied_message(pdb)}],
            ),
        )
    if dry_run:
        return EvictionVerdict(True)
    new = copy.deepcopy(dict(pdb))
    nst = new.setdefault("status", {})
    nst["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        nst["conditions"] = disruption_allowed_condition(nst, now)
    nst["disruptedPods"] = {**(nst.get("disruptedPods") or {}), name(pod): format_time(now)}
    return EvictionVerdict(True, pdb_update=new)
