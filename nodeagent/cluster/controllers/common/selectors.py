"""metav1.LabelSelector and labels.Selector matching (apimachinery pkg/labels, LabelSelectorAsSelector).

Hand-written: it is a dozen lines of set logic, and the library that would carry it (the official
client) does not implement selector matching. Semantics that matter to controllers: a nil selector
matches nothing, an empty one ({}) matches everything; In/NotIn/Exists/DoesNotExist; NotIn and
DoesNotExist match objects without the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.core.errors import FieldError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_errors(selector: object, path: str = "spec.selector") -> list[FieldError]:
    """What LabelSelectorAsSelector would refuse, with the field path (empty: valid)."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [FieldError(path, "must be a label selector")]
    errs: list[FieldError] = []
    ml = selector.get("matchLabels")
    if ml is not None and not (isinstance(ml, Mapping) and all(isinstance(v, str) for v in ml.values())):
        errs.append(FieldError(f"{path}.matchLabels", "must be a map of strings"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            errs.append(FieldError(p, "must be a label selector requirement"))
            continue
        op, values = expr.get("operator"), expr.get("values") or []
        if op not in OPERATORS:
            errs.append(FieldError(f"{p}.operator", f'"{op}" is not a valid label selector operator'))
        elif op in ("In", "NotIn") and not values:
            errs.append(FieldError(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(FieldError(f"{p}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    return errs


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Does a metav1.LabelSelector select these labels? Invalid selectors select nothing (upstream
    controllers skip an object whose selector does not convert)."""
    if selector is None or not isinstance(selector, Mapping):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            return False
        k, op, values = str(expr.get("key")), expr.get("operator"), expr.get("values") or []
        present = k in labels
        if op == "In":
            if not present or labels[k] not in values:
                return False
        elif op == "NotIn":
            if present and labels[k] in values:
                return False
        elif op == "Exists":
            if not present:
                return False
        elif op == "DoesNotExist":
            if present:
                return False
        else:
            return False
    return True


def is_empty(selector: Mapping[str, Any] | None) -> bool:
    """An empty (select-everything) selector: what Deployments and DaemonSets refuse to act on."""
    return isinstance(selector, Mapping) and not selector.get("matchLabels") and not selector.get("matchExpressions")


def labels_match(template_labels: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """labels.Set(t).AsSelector().Matches(l): every template label present with its value."""
    return all(labels.get(k) == v for k, v in template_labels.items())


def with_label(selector: Mapping[str, Any] | None, label: str, value: str) -> dict[str, Any]:
    """CloneSelectorAndAddLabel: a copy with `label=value` added to matchLabels."""
    out = dict(selector or {})
    out["matchLabels"] = {**(out.get("matchLabels") or {}), label: value}
    return out
