"""PriorityClass (scheduling.k8s.io/v1) and ResourceQuota (core/v1): validated by the admission
room's parsers (cluster/admission/priority.py, quota.py), so the API and admission agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.admission.priority import PREEMPT_LOWER_PRIORITY, parse_priority_class
from nodeagent.cluster.admission.quota import parse_resource_quota
from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.cluster.registry.table import AGE, NAME, Column, age, since
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.names import invalid

_PC_FIELDS = ("value", "globalDefault", "preemptionPolicy", "description")


class PriorityClassStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", False, short_names=("pc",))
    columns = (NAME, Column("Value", type="integer", description="Value is the integer value of this priority class."),
               Column("Global-Default", type="boolean", description="globalDefault specifies whether this "
                                                                    "PriorityClass should be considered as the default "
                                                                    "priority for pods that do not have any priority "
                                                                    "class."),
               AGE,
               Column("PreemptionPolicy", priority=1, description="preemptionPolicy is the Policy for preempting pods "
                                                                  "with lower priority."))

    def default(self, obj: Obj) -> None:
        obj.setdefault("preemptionPolicy", PREEMPT_LOWER_PRIORITY)

    def validate(self, obj: Obj) -> list[FieldError]:
        bare = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "metadata": {"name": obj["metadata"].get("name")},
                **{k: obj[k] for k in _PC_FIELDS if k in obj}}
        try:
            parse_priority_class(bare)
        except ValidationErrors as e:
            return [x for x in e.errors if x.path != "metadata.name"]
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new)
        for k in ("value", "preemptionPolicy"):
            if new.get(k) != old.get(k):
                errs.append(FieldError(k, "Forbidden: may not be changed in an update."))
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), obj.get("value", 0), bool(obj.get("globalDefault")),
                age(obj, now_wall),
                obj.get("preemptionPolicy", "")]


class ResourceQuotaStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "", "v1", "ResourceQuota", "resourcequotas", "resourcequota", True, short_names=("quota",),
        subresources=(Subresource("status", "ResourceQuota", ("get", "patch", "update")),))
    has_status = True
    columns = (NAME, AGE, Column("Request", description="Request represents a minimum amount of cpu/memory that a "
                                                        "container may consume."),
               Column("Limit", description="Limits control the maximum amount of cpu/memory that a container may use "
                                           "independent of contention on the node."))

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec", {})
        if spec is None:
            return []
        if not isinstance(spec, dict):
            return [FieldError("spec", invalid(str(spec)[:60], "must be an object"))]
        hard = spec.get("hard")
        if hard is not None and not isinstance(hard, dict):
            return [FieldError("spec.hard", invalid(str(hard)[:60], "must be a map of resource names to quantities"))]
        for k in ("scopes",):
            if k in spec and spec[k] is not None and not isinstance(spec[k], list):
                return [FieldError(f"spec.{k}", invalid(str(spec[k])[:60], "must be a list"))]
        bare = {"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": obj["metadata"].get("name"), "namespace": obj["metadata"].get("namespace")},
                "spec": spec}
        try:
            parse_resource_quota(bare)
        except ValidationErrors as e:
            return [x for x in e.errors if not x.path.startswith("metadata.")]
        return []

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        status = new.get("status")
        if status is not None and not isinstance(status, dict):
            return [FieldError("status", invalid(str(status)[:60], "must be an object"))]
        for k in ("hard", "used"):
            v = (status or {}).get(k)
            quantities = isinstance(v, dict) and all(isinstance(q, (str, int, float)) for q in v.values())
            if v is not None and not quantities:
                return [FieldError(f"status.{k}", "Invalid value: must be a map of resource names to quantities")]
        return []

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        status = obj.get("status") or {}
        hard, used = status.get("hard") or (obj.get("spec") or {}).get("hard") or {}, status.get("used") or {}
        req: list[str] = []
        lim: list[str] = []
        for name in sorted(hard):
            text = f"{name}: {used.get(name, '0')}/{hard[name]}"
            (lim if name.startswith("limits.") else req).append(text)
        return [obj["metadata"].get("name", ""), since(obj["metadata"].get("creationTimestamp"), now_wall),
                ", ".join(req), ", ".join(lim)]
