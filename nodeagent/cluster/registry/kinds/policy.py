"""LimitRange (core/v1) and Lease (coordination.k8s.io/v1): small objects with typed fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.strategy import Obj, Strategy, text
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid
from nodeagent.core.quantity import coerce_quantity

LIMIT_TYPES = ("Pod", "Container", "PersistentVolumeClaim")
CREATED_AT = Column("Created At", type="date", description="CreationTimestamp is a timestamp representing the server "
                                                           "time when this object was created.")


class LimitRangeStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("", "v1", "LimitRange", "limitranges", "limitrange", True,
                                                short_names=("limits",))
    allow_create_on_update = True
    columns = (NAME, CREATED_AT)

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [FieldError("spec", "Required value")]
        limits = spec.get("limits")
        if not isinstance(limits, list):
            return [FieldError("spec.limits", "Required value")]
        errs = []
        for i, item in enumerate(limits):
            p = f"spec.limits[{i}]"
            if not isinstance(item, dict):
                errs.append(FieldError(p, "Invalid value: must be an object"))
                continue
            if item.get("type") not in LIMIT_TYPES:
                errs.append(FieldError(f"{p}.type", f"Unsupported value: {item.get('type')!r}: supported values: "
                                                    '"Container", "PersistentVolumeClaim", "Pod"'))
            for f in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                values = item.get(f)
                if values is None:
                    continue
                if not isinstance(values, dict):
                    errs.append(FieldError(f"{p}.{f}", "Invalid value: must be a map of resource names to quantities"))
                    continue
                for res, q in values.items():
                    try:
                        coerce_quantity(q)
                    except (ValueError, TypeError) as e:
                        errs.append(FieldError(f"{p}.{f}[{res}]", invalid(str(q)[:40], str(e))))
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), obj["metadata"].get("creationTimestamp", "")]


_LEASE_INTS = ("leaseDurationSeconds", "leaseTransitions")
_LEASE_STRS = ("holderIdentity", "acquireTime", "renewTime", "strategy", "preferredHolder")


class LeaseStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo("coordination.k8s.io", "v1", "Lease", "leases", "lease", True)
    allow_create_on_update = True
    columns = (NAME, Column("Holder", description="holderIdentity contains the identity of the holder of a current "
                                                  "lease."), AGE)

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec", {})
        if spec is None:
            return []
        if not isinstance(spec, dict):
            return [FieldError("spec", invalid(str(spec)[:60], "must be an object"))]
        errs = []
        for f in _LEASE_INTS:
            v = spec.get(f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                errs.append(FieldError(f"spec.{f}", invalid(v, "must be an integer")))
            elif f == "leaseDurationSeconds" and isinstance(v, int) and v <= 0:
                errs.append(FieldError(f"spec.{f}", invalid(v, "must be greater than 0")))
            elif isinstance(v, int) and v < 0:
                errs.append(FieldError(f"spec.{f}", invalid(v, "must be greater than or equal to 0")))
        for f in _LEASE_STRS:
            v = spec.get(f)
            if v is not None and not isinstance(v, str):
                errs.append(FieldError(f"spec.{f}", invalid(str(v)[:60], "must be a string")))
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), text((obj.get("spec") or {}).get("holderIdentity")),
                age(obj, now_wall)]
