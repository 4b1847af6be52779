"""RBAC (rbac.authorization.k8s.io/v1): Role, ClusterRole, RoleBinding, ClusterRoleBinding.

Names are path segments (anything but `.`, `..`, `/`, `%`), as kube-apiserver allows for RBAC
objects (`system:node` is a valid ClusterRole name). Rules need verbs, and apiGroups whenever they
name resources; a binding's roleRef may not change (delete and recreate the binding instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.auth.attributes import RBAC_GROUP as GROUP
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.kinds.policy import CREATED_AT
from nodeagent.cluster.registry.strategy import Obj, Strategy, path_segment_name_errors
from nodeagent.cluster.registry.table import AGE, NAME, Column, age
from nodeagent.core.errors import FieldError

SUBJECT_KINDS = ("User", "Group", "ServiceAccount")


def _str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def rule_errors(rules: object, path: str = "rules") -> list[FieldError]:
    if rules is None:
        return []
    if not isinstance(rules, list):
        return [FieldError(path, "Invalid value: must be a list of policy rules")]
    errs = []
    for i, r in enumerate(rules):
        p = f"{path}[{i}]"
        if not isinstance(r, dict):
            errs.append(FieldError(p, "Invalid value: must be an object"))
            continue
        for f in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"):
            if f in r and r[f] is not None and not _str_list(r[f]):
                errs.append(FieldError(f"{p}.{f}", "Invalid value: must be a list of strings"))
        if errs:
            continue
        if not r.get("verbs"):
            errs.append(FieldError(f"{p}.verbs", "Required value: verbs must contain at least one value"))
        if r.get("nonResourceURLs"):
            if path.startswith("rules") and r.get("resources"):
                errs.append(FieldError(f"{p}.nonResourceURLs", "Invalid value: rules cannot apply to both regular "
                                                               "resources and non-resource URLs"))
        elif not r.get("apiGroups") and r.get("resources"):
            errs.append(FieldError(f"{p}.apiGroups", "Required value: resource rules must supply at least one api "
                                                     "group"))
        elif not r.get("resources"):
            errs.append(FieldError(f"{p}.resources", "Required value: resource rules must supply at least one "
                                                     "resource"))
    return errs


class _RBAC(Strategy):
    name_errors = staticmethod(path_segment_name_errors)
    allow_create_on_update = True


class RoleStrategy(_RBAC):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "Role", "roles", "role", True)
    columns = (NAME, CREATED_AT)

    def validate(self, obj: Obj) -> list[FieldError]:
        return rule_errors(obj.get("rules"))

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return [obj["metadata"].get("name", ""), obj["metadata"].get("creationTimestamp", "")]


class ClusterRoleStrategy(RoleStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "ClusterRole", "clusterroles", "clusterrole", False)

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        agg = obj.get("aggregationRule")
        if agg is not None and not isinstance(agg, dict):
            errs.append(FieldError("aggregationRule", "Invalid value: must be an object"))
        return errs


class RoleBindingStrategy(_RBAC):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "RoleBinding", "rolebindings", "rolebinding", True)
    role_kinds: ClassVar[tuple[str, ...]] = ("Role", "ClusterRole")
    columns = (NAME, Column("Role", description="RoleRef can reference a Role in the current namespace or a "
                                                "ClusterRole in the global namespace."), AGE,
               Column("Users", priority=1, description="Users in the binding."),
               Column("Groups", priority=1, description="Groups in the binding."),
               Column("ServiceAccounts", priority=1, description="ServiceAccounts in the binding."))

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = []
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return [FieldError("roleRef", "Required value")]
        if ref.get("apiGroup") != GROUP:
            errs.append(FieldError("roleRef.apiGroup", f"Unsupported value: {ref.get('apiGroup')!r}: supported values: "
                                                       f'"{GROUP}"'))
        if ref.get("kind") not in self.role_kinds:
            errs.append(FieldError("roleRef.kind", f"Unsupported value: {ref.get('kind')!r}: supported values: "
                                   + ", ".join(f'"{k}"' for k in self.role_kinds)))
        if not isinstance(ref.get("name"), str) or not ref.get("name"):
            errs.append(FieldError("roleRef.name", "Required value"))
        subjects = obj.get("subjects")
        if subjects is not None:
            if not isinstance(subjects, list):
                return [*errs, FieldError("subjects", "Invalid value: must be a list")]
            for i, s in enumerate(subjects):
                p = f"subjects[{i}]"
                if not isinstance(s, dict):
                    errs.append(FieldError(p, "Invalid value: must be an object"))
                    continue
                if s.get("kind") not in SUBJECT_KINDS:
                    errs.append(FieldError(f"{p}.kind", f"Unsupported value: {s.get('kind')!r}: supported values: "
                                                        '"ServiceAccount", "User", "Group"'))
                if not isinstance(s.get("name"), str) or not s.get("name"):
                    errs.append(FieldError(f"{p}.name", "Required value"))
                if s.get("kind") == "ServiceAccount" and self.info.namespaced is False and not s.get("namespace"):
                    errs.append(FieldError(f"{p}.namespace", "Required value"))
        return errs

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        errs = self.validate(new)
        if new.get("roleRef") != old.get("roleRef"):
            errs.append(FieldError("roleRef", "Invalid value: cannot change roleRef"))
        return errs

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        ref = obj.get("roleRef") or {}
        subjects = [s for s in obj.get("subjects") or [] if isinstance(s, dict)]

        def names(kind: str) -> str:
            shown = [f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount" else str(s.get("name"))
                     for s in subjects if s.get("kind") == kind]
            return ", ".join(shown)

        return [obj["metadata"].get("name", ""), f"{ref.get('kind')}/{ref.get('name')}", age(obj, now_wall),
                names("User"), names("Group"), names("ServiceAccount")]


class ClusterRoleBindingStrategy(RoleBindingStrategy):
    info: ClassVar[ResourceInfo] = ResourceInfo(GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings",
                                                "clusterrolebinding", False)
    role_kinds = ("ClusterRole",)
