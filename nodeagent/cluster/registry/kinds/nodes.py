"""Nodes (core/v1, cluster-scoped): an agent creates its Node with a status, then keeps the status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo, Subresource
from nodeagent.cluster.registry.strategy import Obj, Strategy
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError
from nodeagent.core.names import invalid

ROLE_PREFIX = "node-role.kubernetes.io/"


class NodeStrategy(Strategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        "", "v1", "Node", "nodes", "node", False, short_names=("no",),
        subresources=(Subresource("status", "Node", ("get", "patch", "update")),))
    has_status = True
    return_deleted_object = True
    field_labels = frozenset({"spec.unschedulable"})
    columns = (NAME, Column("Status", description="The status of the node"),
               Column("Roles", description="The roles of the node"), AGE,
               Column("Version", description="Kubelet Version reported by the node."),
               Column("Internal-IP", priority=1, description="List of internal IPs."),
               Column("External-IP", priority=1, description="List of external IPs."),
               Column("OS-Image", priority=1, description="OS image reported by the node."),
               Column("Kernel-Version", priority=1, description="Kernel version reported by the node."),
               Column("Container-Runtime", priority=1, description="Container runtime reported by the node."))

    def prepare_for_create(self, obj: Obj) -> None:
        """A node is created with its status (the agent's first report), unlike most kinds."""

    def validate(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec", {})
        if spec is None:
            return []
        if not isinstance(spec, dict):
            return [FieldError("spec", invalid(str(spec)[:60], "must be an object"))]
        errs = []
        if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
            errs.append(FieldError("spec.unschedulable", invalid(spec["unschedulable"], "must be a boolean")))
        taints = spec.get("taints")
        if taints is not None:
            if not isinstance(taints, list):
                errs.append(FieldError("spec.taints", "Invalid value: must be a list"))
            else:
                for i, t in enumerate(taints):
                    if not isinstance(t, dict) or not isinstance(t.get("key"), str) or not t.get("key"):
                        errs.append(FieldError(f"spec.taints[{i}].key", "Required value"))
                    elif t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                        errs.append(FieldError(f"spec.taints[{i}].effect", f"Unsupported value: {t.get('effect')!r}: "
                                               'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'))
        return errs

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        status = new.get("status")
        if status is not None and not isinstance(status, dict):
            return [FieldError("status", invalid(str(status)[:60], "must be an object"))]
        return []

    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        out = super().fields(obj)
        out["spec.unschedulable"] = "true" if (obj.get("spec") or {}).get("unschedulable") else "false"
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        ready = "Unknown"
        for c in status.get("conditions") or []:
            if isinstance(c, dict) and c.get("type") == "Ready":
                ready = {"True": "Ready", "False": "NotReady"}.get(str(c.get("status")), "Unknown")
        shown = ready + (",SchedulingDisabled" if spec.get("unschedulable") else "")
        roles = sorted(k[len(ROLE_PREFIX):] for k in (meta.get("labels") or {}) if k.startswith(ROLE_PREFIX))
        info = status.get("nodeInfo") or {}
        addrs = [a for a in status.get("addresses") or [] if isinstance(a, dict)]

        def ips(kind: str) -> str:
            return ",".join(str(a.get("address")) for a in addrs if a.get("type") == kind) or "<none>"

        return [meta.get("name", ""), shown, ",".join(r for r in roles if r) or "<none>", age(obj, now_wall),
                info.get("kubeletVersion", ""), ips("InternalIP"), ips("ExternalIP"), info.get("osImage", "<unknown>"),
                info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]
