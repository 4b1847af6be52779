"""The admission chain in kube-apiserver's order (NamespaceLifecycle is the registry's own check,
before it): NodeRestriction when given (`first`: it only refuses, so before any plugin mutates or
charges), the mutating plugins LimitRanger, Priority, DefaultTolerationSeconds, then the VPA's (a
mutating webhook upstream, so after the built-in mutating plugins), then the validating ones
LimitRanger, ResourceQuota (always last: it charges what the others let through), then any other
admitter (RBAC escalation). A pod whose resources a plugin changed gets its
status.qosClass computed again.

A pods/resize goes through LimitRanger's validation (its SupportsAttributes takes UPDATE on the
resize subresource: min, max and maxLimitRequestRatio hold for the new resources; the defaults
were set at creation and resize validation forbids removing a request or limit) and ResourceQuota
(the growth is charged), both 403 as at creation. A pod being deleted is left alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.cluster.admission.tolerations import add_default_tolerations
from nodeagent.cluster.admitters.limitranger import LimitRanger
from nodeagent.cluster.admitters.priority import PriorityAdmission
from nodeagent.cluster.admitters.quota import QuotaAdmission
from nodeagent.cluster.admitters.vpa import VPAAdmission
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.pods import pod_model
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.plugins import Admitter, Operation
from nodeagent.cluster.registry.registry import Registry
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.qos import qos_class


class AdmissionChain:
    def __init__(self, registry: Registry, *, extra: Sequence[Admitter] = (), first: Sequence[Admitter] = ()) -> None:
        self.limits = LimitRanger(registry)
        self.priority = PriorityAdmission(registry)
        self.quota = QuotaAdmission(registry)
        self.vpa = VPAAdmission(registry)
        self.extra = list(extra)
        self.first = list(first)

    async def admit(self, operation: Operation, info: ResourceInfo, obj: dict[str, Any],
                    old: dict[str, Any] | None, *, subresource: str, ctx: Context) -> None:
        for admitter in self.first:
            await admitter.admit(operation, info, obj, old, subresource=subresource, ctx=ctx)
        pod_create = operation == "CREATE" and not subresource and info.group == "" and info.plural == "pods"
        if pod_create:
            ns = str(obj["metadata"].get("namespace") or "")
            items = await self.limits.items(ns)
            defaulted = self.limits.mutate(obj, items)
            await self.priority.admit_pod(obj)
            add_default_tolerations(obj)
            resized = await self.vpa.admit_pod(obj)
            if defaulted or resized:
                _requalify(obj)
            self.limits.validate(obj, items)
        elif _pod_resize(operation, info, subresource) and old is not None:
            if not old["metadata"].get("deletionTimestamp"):
                self.limits.validate(obj, await self.limits.items(str(obj["metadata"].get("namespace") or "")))
            await self.quota.admit_resize(obj, old)
        elif info.group == "scheduling.k8s.io" and info.plural == "priorityclasses" and not subresource:
            await self.priority.admit_class(operation, obj)
        if operation == "CREATE" and not subresource:
            await self.quota.admit(info, obj)
        for admitter in self.extra:
            await admitter.admit(operation, info, obj, old, subresource=subresource, ctx=ctx)


def _pod_resize(operation: Operation, info: ResourceInfo, subresource: str) -> bool:
    return operation == "UPDATE" and subresource == "resize" and info.group == "" and info.plural == "pods"


def _requalify(obj: dict[str, Any]) -> None:
    status = obj.get("status")
    if not isinstance(status, dict):
        return
    try:
        status["qosClass"] = qos_class(pod_model(obj))
    except (ValidationErrors, ValueError):
        pass  # the defaults made it invalid: validation says so
