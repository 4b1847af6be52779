"""podFailurePolicy (pod_failure_policy.go matchPodFailurePolicy): the first rule that matches a
failed pod decides: FailJob (with upstream's message), Ignore (not counted), Count; FailIndex needs
backoffLimitPerIndex, which this core does not implement, so it counts like Count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _terminated_match(statuses: list[Mapping[str, Any]], req: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in statuses:
        term = (cs.get("state") or {}).get("terminated")
        if term is None:
            continue
        if req.get("containerName") and req["containerName"] != cs.get("name"):
            continue
        code = int(term.get("exitCode") or 0)
        if code == 0:
            continue
        values = [int(v) for v in req.get("values") or []]
        if (req.get("operator") == "In") == (code in values):
            return cs
    return None


def match(policy: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> tuple[str | None, bool, str | None]:
    """(FailJob message, counts as a failure, the action that matched)."""
    if not policy:
        return None, True, None
    st = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            req = rule["onExitCodes"]
            cs = _terminated_match(st.get("containerStatuses") or [], req) or _terminated_match(
                st.get("initContainerStatuses") or [], req
            )
            if cs is None:
                continue
            if action == "FailJob":
                code = cs["state"]["terminated"].get("exitCode")
                msg = (
                    f"Container {cs.get('name')} for pod {who} failed with exit code {code} "
                    f"matching FailJob rule at index {i}"
                )
                return msg, True, action
        elif rule.get("onPodConditions") is not None:
            cond = next(
                (
                    c
                    for c in st.get("conditions") or []
                    for p in rule["onPodConditions"]
                    if c.get("type") == p.get("type") and c.get("status") == (p.get("status") or "True")
                ),
                None,
            )
            if cond is None:
                continue
            if action == "FailJob":
                return f"Pod {who} has condition {cond.get('type')} matching FailJob rule at index {i}", True, action
        else:
            continue
        if action == "Ignore":
            return None, False, action
        return None, True, action
    return None, True, None
