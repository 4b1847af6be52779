"""What the workload kinds share: label selectors, pod templates, counts and int-or-percent values.

Pure helpers for apps/v1, batch/v1 and policy/v1 strategies: validation with kube-apiserver's
field paths and messages (apps/validation, batch/validation, metav1 validation), the selector
string kubectl shows and the Scale subresource reports, and the pod template's defaults (the same
SetDefaults_PodSpec a pod gets). Template validation checks the essentials only (containers with
names and images, restartPolicy); whether a node can run the pod is decided when a controller
creates it, by the pod's own validation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from nodeagent.cluster.registry.kinds.pods import default_pod_spec
from nodeagent.cluster.registry.strategy import Obj, label_errors
from nodeagent.core.errors import FieldError
from nodeagent.core.names import dns1123_label_errors, invalid

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_INT32 = 2**31 - 1
_PERCENT = re.compile(r"^[0-9]+%$")


def quoted(value: object) -> str:
    """A value as Go's %q shows it in field errors ("Always", not 'Always')."""
    return json.dumps((value if isinstance(value, str) else str(value))[:60])


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def count_errors(spec: Mapping[str, Any], path: str, name: str, minimum: int = 0) -> list[FieldError]:
    """An optional int32 field that must be >= minimum (ValidateNonnegativeField and friends)."""
    value = spec.get(name)
    if value is None:
        return []
    p = f"{path}.{name}"
    if not is_int(value) or not -MAX_INT32 - 1 <= value <= MAX_INT32:
        return [FieldError(p, invalid(_short(value), "must be a 32-bit integer"))]
    if value < minimum:
        return [FieldError(p, invalid(value, f"must be greater than or equal to {minimum}"))]
    return []


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 64 else text[:61] + "..."


def int_or_percent_errors(value: object, path: str) -> list[FieldError]:
    """IntOrString fields of rolling updates and PDBs: a non-negative int or `N%`."""
    if value is None:
        return []
    if is_int(value):
        return [] if value >= 0 else [FieldError(path, invalid(value, "must be greater than or equal to 0"))]
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [FieldError(path, invalid(value, "a valid percent string must be a numeric string followed by an "
                                                    "ending '%' (e.g. '1%',  or '93%', regex used for validation is "
                                                    "'[0-9]+%')"))]
        return []
    return [FieldError(path, invalid(_short(value), "must be an integer or percentage (e.g '5%')"))]


def is_zero(value: object) -> bool:
    return value == 0 or value == "0%"


def percent_over_100(value: object, path: str) -> list[FieldError]:
    if isinstance(value, str) and _PERCENT.match(value) and int(value[:-1]) > 100:
        return [FieldError(path, invalid(value, "must not be greater than 100%"))]
    return []


# ---- label selectors -----------------------------------------------------------------------------
def selector_errors(selector: object, path: str) -> list[FieldError]:
    """ValidateLabelSelector: matchLabels as labels, each requirement with a known operator."""
    if not isinstance(selector, dict):
        return [FieldError(path, invalid(_short(selector), "must be a label selector"))]
    errs = label_errors(f"{path}.matchLabels", selector.get("matchLabels"))
    exprs = selector.get("matchExpressions")
    if exprs is None:
        return errs
    if not isinstance(exprs, list):
        return [*errs, FieldError(f"{path}.matchExpressions", invalid(_short(exprs), "must be a list"))]
    for i, expr in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, dict):
            errs.append(FieldError(p, invalid(_short(expr), "must be a label selector requirement")))
            continue
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        if not isinstance(key, str) or not key:
            errs.append(FieldError(f"{p}.key", "Required value"))
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
            errs.append(FieldError(f"{p}.values", invalid(_short(values), "must be a list of strings")))
            continue
        if op not in OPERATORS:
            errs.append(FieldError(f"{p}.operator", f"Unsupported value: {quoted(op)}: supported values: "
                                                    '"In", "NotIn", "Exists", "DoesNotExist"'))
        elif op in ("In", "NotIn") and not values:
            errs.append(FieldError(f"{p}.values", "Required value: must be specified when `operator` is 'In' or "
                                                  "'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(FieldError(f"{p}.values", "Forbidden: may not be specified when `operator` is 'Exists' or "
                                                  "'DoesNotExist'"))
    return errs


def is_empty_selector(selector: Mapping[str, Any]) -> bool:
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """LabelSelectorAsSelector(selector).Matches(labels) for a selector that validated."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) \
                or (op == "NotIn" and present and labels[key] in values) \
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def selector_string(selector: object) -> str:
    """labels.Selector.String() of a metav1.LabelSelector: requirements sorted by key, values sorted
    (what Scale's status.selector carries and kubectl's SELECTOR column shows)."""
    if not isinstance(selector, Mapping):
        return ""
    reqs: list[tuple[str, str]] = []
    labels = selector.get("matchLabels")
    for k, v in (labels.items() if isinstance(labels, Mapping) else ()):
        reqs.append((str(k), f"{k}={v}"))
    exprs = selector.get("matchExpressions")
    for e in exprs if isinstance(exprs, list) else ():
        if not isinstance(e, Mapping):
            continue
        key, op = str(e.get("key", "")), e.get("operator")
        values = ",".join(sorted(str(v) for v in e.get("values") or []))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                "DoesNotExist": f"!{key}"}.get(str(op))
        if text is not None:
            reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs, key=lambda r: r[0]))


def format_selector(selector: object) -> str:
    """metav1.FormatLabelSelector: the string, or <none> for a selector that selects everything."""
    return selector_string(selector) or "<none>"


# ---- pod templates -------------------------------------------------------------------------------
def default_template(template: object, restart_policy: str = "Always") -> None:
    """The pod template's spec gets a pod's defaults (kube applies SetDefaults_PodSpec to templates)."""
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"], restart_policy)


def template_errors(template: object, path: str, restart_policies: tuple[str, ...]) -> list[FieldError]:
    """ValidatePodTemplateSpec's essentials: labels, containers with unique names and an image,
    and a restartPolicy the owner allows."""
    if template is None:
        return [FieldError(path, "Required value")]
    if not isinstance(template, dict):
        return [FieldError(path, invalid(_short(template), "must be a pod template"))]
    errs: list[FieldError] = []
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        errs.append(FieldError(f"{path}.metadata", invalid(_short(meta), "must be an object")))
    elif isinstance(meta, dict):
        errs += label_errors(f"{path}.metadata.labels", meta.get("labels"))
    spec = template.get("spec")
    sp = f"{path}.spec"
    if not isinstance(spec, dict):
        return [*errs, FieldError(sp, "Required value" if spec is None else invalid(_short(spec), "must be an object"))]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errs.append(FieldError(f"{sp}.containers", "Required value"))
    else:
        errs += _container_errors(containers, f"{sp}.containers", image_required=True)
    init = spec.get("initContainers")
    if init is not None:
        if not isinstance(init, list):
            errs.append(FieldError(f"{sp}.initContainers", invalid(_short(init), "must be a list")))
        else:
            errs += _container_errors(init, f"{sp}.initContainers", image_required=True)
    policy = spec.get("restartPolicy")
    if policy not in restart_policies:
        supported = ", ".join(f'"{p}"' for p in restart_policies)
        errs.append(FieldError(f"{sp}.restartPolicy", f"Unsupported value: {quoted(policy)}: supported values: "
                                                      f"{supported}"))
    return errs


def _container_errors(containers: list[Any], path: str, *, image_required: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, c in enumerate(containers):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            errs.append(FieldError(p, invalid(_short(c), "must be a container")))
            continue
        name = c.get("name")
        if not isinstance(name, str) or not name:
            errs.append(FieldError(f"{p}.name", "Required value"))
        else:
            errs += [FieldError(f"{p}.name", invalid(name, e)) for e in dns1123_label_errors(name)]
            if name in seen:
                errs.append(FieldError(f"{p}.name", f'Duplicate value: "{name}"'))
            seen.add(name)
        image = c.get("image")
        if image is not None and not isinstance(image, str):
            errs.append(FieldError(f"{p}.image", invalid(_short(image), "must be a string")))
        elif image_required and (not image or image.strip() != image):
            errs.append(FieldError(f"{p}.image", "Required value" if not image else
                                   invalid(image, "must not have leading or trailing whitespace")))
    return errs


def selector_template_errors(spec: Mapping[str, Any], path: str, kind: str, *,
                             template_key: str = "template") -> list[FieldError]:
    """A controller's selector: required, non-empty, valid, and matching its template's labels."""
    selector = spec.get("selector")
    if selector is None:
        return [FieldError(f"{path}.selector", "Required value")]
    errs = selector_errors(selector, f"{path}.selector")
    if errs:
        return errs
    if is_empty_selector(selector):
        return [FieldError(f"{path}.selector", invalid(_short(selector), f"empty selector is invalid for {kind}"))]
    template = spec.get(template_key)
    if isinstance(template, dict):
        meta: dict[str, Any] = template["metadata"] if isinstance(template.get("metadata"), dict) else {}
        labels: dict[str, Any] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
        if not all(isinstance(v, str) for v in labels.values()):
            return []  # reported by the template's label validation
        if not selector_matches(selector, labels):
            return [FieldError(f"{path}.{template_key}.metadata.labels",
                               invalid(_labels_repr(labels), "`selector` does not match template `labels`"))]
    return []


def _labels_repr(labels: Mapping[str, str]) -> str:
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"


def immutable(new: object, old: object, path: str) -> list[FieldError]:
    if new != old:
        return [FieldError(path, invalid(_short(new), "field is immutable"))]
    return []


def spec_dict(obj: Obj) -> tuple[dict[str, Any] | None, list[FieldError]]:
    """The object's spec when it is an object; else the 422 naming it."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        return spec, []
    return None, [FieldError("spec", "Required value" if spec is None else invalid(_short(spec), "must be an object"))]


def containers_images(template: object) -> tuple[str, str]:
    """kubectl's CONTAINERS and IMAGES wide columns from a pod template."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    items = [c for c in containers or [] if isinstance(c, Mapping)] if isinstance(containers, list) else []
    return ",".join(str(c.get("name", "")) for c in items), ",".join(str(c.get("image", "")) for c in items)


def status_count_errors(status: object, names: tuple[str, ...]) -> list[FieldError]:
    """A /status write: an object whose counts are non-negative int32s."""
    if status is None:
        return []
    if not isinstance(status, dict):
        return [FieldError("status", invalid(_short(status), "must be an object"))]
    errs: list[FieldError] = []
    for n in names:
        errs += count_errors(status, "status", n)
    return errs
