"""The ServiceAccounts controller's decision (pkg/controller/serviceaccount/serviceaccounts_controller.go):
an active namespace gets each of the configured accounts (upstream's only one, `default`) it lacks;
a namespace being deleted gets none (its content is going away, and creates there are refused)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nodeagent.cluster.controllers.common.actions import Create, Plan
from nodeagent.cluster.controllers.common.meta import being_deleted, name, status

DEFAULT_ACCOUNTS = ("default",)


def active(namespace: Mapping[str, Any]) -> bool:
    """Neither deleted nor in phase Terminating (a missing phase reads as Active, as the server
    defaults it)."""
    return not being_deleted(namespace) and status(namespace).get("phase", "Active") in ("Active", "", None)


def decide(namespace: Mapping[str, Any] | None, existing: Collection[str],
           accounts: Sequence[str] = DEFAULT_ACCOUNTS) -> Plan:
    """`existing`: the names of the namespace's ServiceAccounts in the cache."""
    plan = Plan()
    if namespace is None or not active(namespace):
        return plan
    for account in accounts:
        if account not in existing:
            plan.add(Create({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": account, "namespace": name(namespace)}}, reason="MissingAccount"))
    return plan
