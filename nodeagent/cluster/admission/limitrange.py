"""The LimitRanger admission plugin, pure (plugin/pkg/admission/limitranger/admission.go).

- LimitRange items are defaulted as the API does (SetDefaults_LimitRangeItem, Container items): a
  max with no default becomes the default limit; a default limit with no defaultRequest, or else a
  min, becomes the default request.
- Mutation (create only): each container without a limit / request for a resource a Container
  item defaults gets it, and the pod is annotated `kubernetes.io/limit-ranger: LimitRanger plugin
  set: cpu, memory request for container c; cpu limit for container c`.
- Validation: per Container item and container (init containers included), and per Pod item over
  the pod's totals: min (a request at least min; none: an error), max (a limit at most max; none:
  an error), maxLimitRequestRatio (limit / request at most the ratio). The API answers 403 Forbidden
  with every message, kube's wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.quantity import Quantity, coerce_quantity

ANNOTATION = "kubernetes.io/limit-ranger"
FIELDS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")
Obj = dict[str, Any]


@dataclass(frozen=True)
class LimitItem:
    type: str
    max: Mapping[str, Quantity] = field(default_factory=dict)
    min: Mapping[str, Quantity] = field(default_factory=dict)
    default: Mapping[str, Quantity] = field(default_factory=dict)
    default_request: Mapping[str, Quantity] = field(default_factory=dict)
    max_ratio: Mapping[str, Quantity] = field(default_factory=dict)


def _quantities(raw: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    for k, v in (raw or {}).items() if isinstance(raw, Mapping) else ():
        try:
            out[str(k)] = coerce_quantity(v)
        except (ValueError, TypeError):
            continue  # the LimitRange strategy refuses such values; a stored one is skipped
    return out


def default_item(item: Obj) -> None:
    """SetDefaults_LimitRangeItem, in place on the object's JSON."""
    if item.get("type") != "Container":
        return
    default = dict(item.get("default") or {})
    for k, v in (item.get("max") or {}).items():
        default.setdefault(k, v)
    request = dict(item.get("defaultRequest") or {})
    for k, v in default.items():
        request.setdefault(k, v)
    for k, v in (item.get("min") or {}).items():
        request.setdefault(k, v)
    if default:
        item["default"] = default
    if request:
        item["defaultRequest"] = request


def parse_items(limit_range: Mapping[str, Any]) -> list[LimitItem]:
    out = []
    for raw in (limit_range.get("spec") or {}).get("limits") or ():
        if not isinstance(raw, dict):
            continue
        item = dict(raw)
        default_item(item)
        out.append(LimitItem(str(item.get("type", "")), _quantities(item.get("max")), _quantities(item.get("min")),
                             _quantities(item.get("default")), _quantities(item.get("defaultRequest")),
                             _quantities(item.get("maxLimitRequestRatio"))))
    return out


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or () if isinstance(c, dict)]


def apply_defaults(pod: Obj, items: list[LimitItem]) -> bool:
    """Set the default limits and requests in place; whether anything was set (and annotated)."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    for item in items:
        if item.type == "Container":
            for k, v in item.default.items():
                limits.setdefault(k, v)
            for k, v in item.default_request.items():
                requests.setdefault(k, v)
    if not requests and not limits:
        return False
    notes: list[str] = []
    for c in _containers(pod):
        res = c.setdefault("resources", {})
        if not isinstance(res, dict):
            continue
        set_req, set_lim = [], []
        for name, q in sorted(limits.items()):
            lim = res.setdefault("limits", {})
            if name not in lim:
                lim[name] = str(q)
                set_lim.append(name)
        for name, q in sorted(requests.items()):
            req = res.setdefault("requests", {})
            if name not in req:
                req[name] = str(q)
                set_req.append(name)
        for k in ("limits", "requests"):
            if res.get(k) == {}:
                del res[k]
        name = c.get("name", "")
        if set_req:
            notes.append(f"{', '.join(set_req)} request for {'init ' if _is_init(pod, c) else ''}container {name}")
        if set_lim:
            notes.append(f"{', '.join(set_lim)} limit for {'init ' if _is_init(pod, c) else ''}container {name}")
    if not notes:
        return False
    meta = pod.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION: "LimitRanger plugin set: " + "; ".join(notes)}
    return True


def _is_init(pod: Obj, c: Obj) -> bool:
    return any(c is x for x in (pod.get("spec") or {}).get("initContainers") or ())


def _read(c: Obj, kind: str) -> dict[str, Quantity]:
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    return _quantities((res or {}).get(kind))


def _fmt_ratio(value: float) -> str:
    return f"{value:f}"


def _check(kind: str, item: LimitItem, requests: Mapping[str, Quantity], limits: Mapping[str, Quantity],
           req_known: set[str] | None = None, lim_known: set[str] | None = None) -> list[str]:
    errs = []
    for res, q in sorted(item.min.items()):
        r = requests.get(res)
        if r is None or (req_known is not None and res not in req_known):
            errs.append(f"minimum {res} usage per {kind} is {q}.  No request is specified")
        elif r < q:
            errs.append(f"minimum {res} usage per {kind} is {q}, but request is {r}")
    for res, q in sorted(item.max.items()):
        lim = limits.get(res)
        if lim is None or (lim_known is not None and res not in lim_known):
            errs.append(f"maximum {res} usage per {kind} is {q}.  No limit is specified")
        elif lim > q:
            errs.append(f"maximum {res} usage per {kind} is {q}, but limit is {lim}")
    for res, q in sorted(item.max_ratio.items()):
        r, lim = requests.get(res), limits.get(res)
        if r is None or r.sign() == 0:
            errs.append(f"{res} max limit to request ratio per {kind} is {q}, but no request is specified or "
                        "request is 0")
        elif lim is None or lim.sign() == 0:
            errs.append(f"{res} max limit to request ratio per {kind} is {q}, but no limit is specified or limit is 0")
        else:
            ratio = lim.milli_value() / r.milli_value()
            if ratio > q.milli_value() / 1000:
                errs.append(f"{res} max limit to request ratio per {kind} is {q}, but provided ratio is "
                            f"{_fmt_ratio(ratio)}")
    return errs


def validate(pod: Obj, items: list[LimitItem]) -> list[str]:
    """Every LimitRange violation of the pod (empty: admitted)."""
    errs: list[str] = []
    containers = _containers(pod)
    for item in items:
        if item.type == "Container":
            for c in containers:
                errs += _check("Container", item, _read(c, "requests"), _read(c, "limits"))
        elif item.type == "Pod":
            spec = pod.get("spec") or {}
            regular = [c for c in spec.get("containers") or () if isinstance(c, dict)]
            init = [c for c in spec.get("initContainers") or () if isinstance(c, dict)]
            req, req_known = _pod_total(regular, init, "requests")
            lim, lim_known = _pod_total(regular, init, "limits")
            errs += _check("Pod", item, req, lim, req_known, lim_known)
    return errs


def _pod_total(regular: list[Obj], init: list[Obj], kind: str) -> tuple[dict[str, Quantity], set[str]]:
    """The pod's total (sum of containers, at least the largest init container) and the resources
    every container states (a Pod max needs each container's limit)."""
    total: dict[str, Quantity] = {}
    known: set[str] | None = None
    for c in regular:
        values = _read(c, kind)
        known = set(values) if known is None else known & set(values)
        for k, v in values.items():
            total[k] = total[k] + v if k in total else v
    for c in init:
        for k, v in _read(c, kind).items():
            if k not in total or v > total[k]:
                total[k] = v
    return total, known or set()
