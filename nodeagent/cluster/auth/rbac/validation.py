"""Defaulting and validation of the four RBAC kinds, as kube-apiserver's (rbac/v1 defaults and
pkg/apis/rbac/validation), for the registry's strategies: `default_object` fills what v1
defaults (apiGroup of roleRef and of User/Group subjects), `validate` returns FieldErrors with
upstream's paths and wording (the API answers 422 Invalid with them as causes); `old` for an
update (a binding's roleRef cannot change).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.auth.attributes import RBAC_GROUP
from nodeagent.core.errors import FieldError
from nodeagent.core.names import dns1123_subdomain_errors

KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")


def _q(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else json.dumps(value)


def _not_supported(path: str, value: object, supported: list[str]) -> FieldError:
    return FieldError(path, f"Unsupported value: {_q(value)}: supported values: " + ", ".join(_q(s) for s in supported))


def path_segment_name_errors(name: str) -> list[str]:
    """apimachinery's path.IsValidPathSegmentName (RBAC object and role names)."""
    if name in (".", ".."):
        return [f'may not be \'{name}\'']
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def default_object(obj: dict[str, Any]) -> dict[str, Any]:
    """rbac/v1 defaulting, in place (and returned)."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    for s in obj.get("subjects") or []:
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = RBAC_GROUP
    return obj


def _strings(rule: Mapping[str, Any], key: str, path: str, errors: list[FieldError]) -> list[str]:
    value = rule.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(FieldError(f"{path}.{key}", f"Invalid value: {_q(value)}: must be a list of strings"))
        return []
    return value


def validate_rule(rule: object, namespaced: bool, path: str) -> list[FieldError]:
    if not isinstance(rule, Mapping):
        return [FieldError(path, f"Invalid value: {_q(rule)}: must be an object")]
    errors: list[FieldError] = []
    verbs = _strings(rule, "verbs", path, errors)
    groups = _strings(rule, "apiGroups", path, errors)
    resources = _strings(rule, "resources", path, errors)
    names = _strings(rule, "resourceNames", path, errors)
    urls = _strings(rule, "nonResourceURLs", path, errors)
    if not verbs:
        errors.append(FieldError(f"{path}.verbs", "Required value: verbs must contain at least one value"))
    if urls:
        if namespaced:
            errors.append(FieldError(f"{path}.nonResourceURLs",
                                     f"Invalid value: {_q(urls)}: namespaced rules cannot apply to non-resource URLs"))
        if groups or resources or names:
            errors.append(FieldError(f"{path}.nonResourceURLs", f"Invalid value: {_q(urls)}: rules cannot apply to "
                                                                "both regular resources and non-resource URLs"))
        return errors
    if not groups:
        errors.append(FieldError(f"{path}.apiGroups", "Required value: resource rules must supply at least one api "
                                                      "group"))
    if not resources:
        errors.append(FieldError(f"{path}.resources", "Required value: resource rules must supply at least one "
                                                      "resource"))
    return errors


def _name(obj: Mapping[str, Any], errors: list[FieldError]) -> None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(name, str) and name:
        errors.extend(FieldError("metadata.name", f"Invalid value: {_q(name)}: {m}")
                      for m in path_segment_name_errors(name))


def _subject(s: object, namespaced: bool, path: str) -> list[FieldError]:
    if not isinstance(s, Mapping):
        return [FieldError(path, f"Invalid value: {_q(s)}: must be an object")]
    errors: list[FieldError] = []
    name, kind, group = s.get("name") or "", s.get("kind") or "", s.get("apiGroup") or ""
    if not name:
        errors.append(FieldError(f"{path}.name", "Required value"))
    if kind == "ServiceAccount":
        if isinstance(name, str) and name:
            errors.extend(FieldError(f"{path}.name", f"Invalid value: {_q(name)}: {m}")
                          for m in dns1123_subdomain_errors(name))
        if group:
            errors.append(_not_supported(f"{path}.apiGroup", group, [""]))
        if not namespaced and not s.get("namespace"):
            errors.append(FieldError(f"{path}.namespace", "Required value"))
    elif kind in ("User", "Group"):
        if group != RBAC_GROUP:
            errors.append(_not_supported(f"{path}.apiGroup", group, [RBAC_GROUP]))
    else:
        errors.append(_not_supported(f"{path}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return errors


def _selectors(agg: object) -> list[FieldError]:
    path = "aggregationRule.clusterRoleSelectors"
    selectors = agg.get("clusterRoleSelectors") if isinstance(agg, Mapping) else None
    if not isinstance(selectors, list) or not selectors:
        return [FieldError(path, "Required value: at least one clusterRoleSelector required if aggregationRule is "
                                 "non-nil")]
    errors: list[FieldError] = []
    for i, sel in enumerate(selectors):
        p = f"{path}[{i}]"
        if not isinstance(sel, Mapping):
            errors.append(FieldError(p, f"Invalid value: {_q(sel)}: must be a label selector"))
            continue
        ml = sel.get("matchLabels") or {}
        if not isinstance(ml, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ml.items()):
            errors.append(FieldError(f"{p}.matchLabels", "Invalid value: must map strings to strings"))
        for j, e in enumerate(sel.get("matchExpressions") or []):
            op = e.get("operator") if isinstance(e, Mapping) else None
            if op not in _SELECTOR_OPS:
                errors.append(_not_supported(f"{p}.matchExpressions[{j}].operator", op, list(_SELECTOR_OPS)))
    return errors


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Every problem of an RBAC object (after default_object); [] when valid."""
    kind = obj.get("kind")
    errors: list[FieldError] = []
    if kind not in KINDS:
        return [_not_supported("kind", kind, list(KINDS))]
    _name(obj, errors)
    if kind in ("Role", "ClusterRole"):
        rules = obj.get("rules") or []
        if not isinstance(rules, list):
            return [*errors, FieldError("rules", f"Invalid value: {_q(rules)}: must be a list")]
        for i, rule in enumerate(rules):
            errors.extend(validate_rule(rule, kind == "Role", f"rules[{i}]"))
        if kind == "ClusterRole" and obj.get("aggregationRule") is not None:
            errors.extend(_selectors(obj["aggregationRule"]))
        return errors
    ref = obj.get("roleRef")
    if not isinstance(ref, Mapping):
        return [*errors, FieldError("roleRef", "Required value")]
    if ref.get("apiGroup") != RBAC_GROUP:
        errors.append(_not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", [RBAC_GROUP]))
    kinds = ["Role", "ClusterRole"] if kind == "RoleBinding" else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        errors.append(_not_supported("roleRef.kind", ref.get("kind") or "", kinds))
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError("roleRef.name", "Required value"))
    else:
        errors.extend(FieldError("roleRef.name", f"Invalid value: {_q(name)}: {m}")
                      for m in path_segment_name_errors(name))
    subjects = obj.get("subjects") or []
    if not isinstance(subjects, list):
        errors.append(FieldError("subjects", f"Invalid value: {_q(subjects)}: must be a list"))
    else:
        for i, s in enumerate(subjects):
            errors.extend(_subject(s, kind == "RoleBinding", f"subjects[{i}]"))
    if old is not None and isinstance(old.get("roleRef"), Mapping) and dict(old["roleRef"]) != dict(ref):
        errors.append(FieldError("roleRef", f"Invalid value: {_q(dict(ref))}: cannot change roleRef"))
    return errors
