"""Namespaces (core/v1, cluster-scoped): Active, then Terminating until spec.finalizers is empty.

Deleting default, kube-system or kube-public is refused (403, as kube-apiserver's NamespaceLifecycle
admission). Deleting another namespace sets deletionTimestamp and phase Terminating; it goes once both
metadata.finalizers and spec.finalizers are empty (the namespace controller empties the latter
through the `finalize` subresource after deleting the namespace's content).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import dns1123_label_errors, invalid, qualified_name_errors

NAME_LABEL = "kubernetes.io/metadata.name"
KUBERNETES_FINALIZER = "kubernetes"
# kube-apiserver's NamespaceLifecycle registers these as immortal (kube-node-lease is not among them)
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


class NamespaceStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "", "v1", "Namespace", "namespaces", "namespace", False, short_names=("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(Subresource("status", "Namespace", ("get", "patch", "update")),
                      Subresource("finalize", "Namespace", ("update",))))
    has_status = True
    return_deleted_object = True
    name_errors = staticmethod(dns1123_label_errors)
    field_labels = frozenset({"status.phase"})
    columns = (NAME, Column("Status", description="The status of the namespace"), AGE)

    def initial_status(self, obj: Obj) -> Obj:
        return {"phase": "Active"}

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict) and "finalizers" not in spec:
            spec["finalizers"] = [KUBERNETES_FINALIZER]
        meta = obj["metadata"]
        name = meta.get("name")
        if isinstance(name, str) and name:
            labels = meta.get("labels")
            if labels is None:
                labels = meta["labels"] = {}
            if isinstance(labels, dict):
                labels[NAME_LABEL] = name

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [FieldError("spec", invalid(str(spec)[:60], "must be an object"))]
        fins = spec.get("finalizers") or []
        if not isinstance(fins, list) or not all(isinstance(f, str) for f in fins):
            return [FieldError("spec.finalizers", "Invalid value: must be a list of strings")]
        return [FieldError(f"spec.finalizers[{i}]", invalid(f, "; ".join(e)))
                for i, f in enumerate(fins) if (e := qualified_name_errors(f))]

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return self.validate(new)

    def prepare_for_subresource_update(self, subresource: str, new: Obj, old: Obj) -> Obj:
        if subresource != "finalize":
            raise NotImplementedError(subresource)
        out = copy.deepcopy(old)
        spec = new.get("spec")
        finalizers = spec.get("finalizers") if isinstance(spec, dict) else None
        out.setdefault("spec", {})["finalizers"] = finalizers or []
        return out

    def held(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("finalizers"))

    def delete_refused(self, name: str) -> str | None:
        """The namespaces the cluster's own objects live in stay (kube's NamespaceLifecycle)."""
        return "this namespace may not be deleted" if name in IMMORTAL_NAMESPACES else None

    def on_deleting(self, obj: Obj) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        out = super().fields(obj)
        out["status.phase"] = str((obj.get("status") or {}).get("phase") or "")
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [(obj.get("metadata") or {}).get("name", ""), (obj.get("status") or {}).get("phase", ""),
                age(obj, now_wall)]
