"""`pods/resize` (KEP-1287, GA in 1.35): what the subresource keeps of an update and what it refuses.

Pure functions over the stored JSON, as upstream's podResizeStrategy (pkg/registry/core/pod/
strategy.go dropNonResizeUpdates) and ValidatePodResize (pkg/apis/core/validation):
- `resize_view`: the stored pod with only the containers' (and init containers') `resources` and
  `resizePolicy` taken from the request (and their names, so a reorder or rename is seen and
  refused, not silently re-applied); metadata, the rest of the spec and the status stay.
- `resize_errors`, in upstream's order: pod-level resources (their resize is alpha in 1.35, off),
  static pods, windows pods, a QoS class change (`spec: Invalid value: "<status.qosClass>": Pod QOS
  Class may not change as a result of resizing`), containers added, removed, renamed or reordered,
  requests or limits removed, a change to anything but cpu and memory, and a resize of a regular
  (non-sidecar) init container.
The model's own checks of the new spec (requests above limits, bad resizePolicy values) come from
the pod strategy's validation before these.
"""

from __future__ import annotations

from typing import Any

from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import parse_quantity
from nodeagent.core.wellknown import CONFIG_MIRROR

Obj = dict[str, Any]
RESIZABLE = ("cpu", "memory")
QOS_MESSAGE = "Pod QOS Class may not change as a result of resizing"
_LISTS = ("initContainers", "containers")


def _containers(spec: Any, key: str) -> list[Any]:
    items = spec.get(key) if isinstance(spec, dict) else None
    return items if isinstance(items, list) else []


def resize_view(new: Obj, old: Obj) -> Obj:
    """The stored pod `old` with the containers' name, resources and resizePolicy of `new`, by
    position (a list of another length is kept whole, for validation to refuse)."""
    out: Obj = {**old, "spec": dict(old.get("spec") or {})}
    meta = dict(old.get("metadata") or {})
    if "resourceVersion" in (new.get("metadata") or {}):  # a precondition stays the request's
        meta["resourceVersion"] = new["metadata"]["resourceVersion"]
    out["metadata"] = meta
    new_spec = new.get("spec") or {}
    for key in _LISTS:
        olds, news = _containers(old.get("spec"), key), _containers(new_spec, key)
        if not olds and not news:
            continue
        if len(olds) != len(news):
            out["spec"][key] = news
            continue
        merged = []
        for o, n in zip(olds, news, strict=True):
            if not isinstance(o, dict) or not isinstance(n, dict):
                merged.append(n)
                continue
            c = {k: v for k, v in o.items() if k not in ("resources", "resizePolicy")}
            c["name"] = n.get("name")
            for field in ("resources", "resizePolicy"):
                if n.get(field) is not None:
                    c[field] = n[field]
            merged.append(c)
        out["spec"][key] = merged
    return out


def _norm_list(items: Any) -> dict[str, Any]:
    """A requests/limits map with quantities compared by value (apiequality.Semantic)."""
    if not isinstance(items, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in items.items():
        try:
            out[k] = parse_quantity(str(v))
        except (ValueError, TypeError):
            out[k] = v
    return out


def _without_cpu_memory(container: Any, old: Any) -> Any:
    """The container with its cpu and memory requests and limits put back to the old ones
    (dropCPUMemoryResourcesFromContainer), quantities normalised; the rest as sent."""
    if not isinstance(container, dict) or not isinstance(old, dict):
        return container
    res, old_res = container.get("resources") or {}, old.get("resources") or {}
    out_res: dict[str, Any] = {}
    for kind in ("requests", "limits"):
        items = {k: v for k, v in _norm_list(res.get(kind)).items() if k not in RESIZABLE}
        items.update({k: v for k, v in _norm_list(old_res.get(kind)).items() if k in RESIZABLE})
        if items:
            out_res[kind] = items
    rest = {k: v for k, v in res.items() if k not in ("requests", "limits") and v not in (None, [], {})}
    out = {k: v for k, v in container.items() if k not in ("resources", "resizePolicy")}
    out["resources"] = {**out_res, **rest}
    return out


def _old_form(container: Any) -> Any:
    if not isinstance(container, dict):
        return container
    res = container.get("resources") or {}
    out_res: dict[str, Any] = {k: _norm_list(res.get(k)) for k in ("requests", "limits") if _norm_list(res.get(k))}
    out_res.update({k: v for k, v in res.items() if k not in ("requests", "limits") and v not in (None, [], {})})
    out = {k: v for k, v in container.items() if k not in ("resources", "resizePolicy")}
    out["resources"] = out_res
    return out


def _removed(new: Any, old: Any) -> bool:
    new_keys = set(new) if isinstance(new, dict) else set()
    old_keys = set(old) if isinstance(old, dict) else set()
    return bool(old_keys - new_keys)


def resize_errors(new: Obj, old: Obj, old_qos: str, new_qos: str | None) -> list[FieldError]:
    """ValidatePodResize over `new` (resize_view of the request) and the stored `old`. `old_qos` is
    the class the pod has (status.qosClass, else computed), `new_qos` that of the new spec (None
    when the model refused it: its errors are reported instead)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}

    def pod_level(spec: Any) -> bool:
        res = spec.get("resources") if isinstance(spec, dict) else None
        return isinstance(res, dict) and bool((res.get("requests") or {}) or (res.get("limits") or {}))

    if pod_level(old_spec) or pod_level(new_spec):
        return [FieldError("", "Forbidden: pods with pod-level resources cannot be resized")]
    if CONFIG_MIRROR in ((old.get("metadata") or {}).get("annotations") or {}):
        return [FieldError("", "Forbidden: static pods cannot be resized")]
    if ((old_spec.get("os") or {}).get("name")) == "windows":
        return [FieldError("", "Forbidden: windows pods cannot be resized")]
    errors: list[FieldError] = []
    if new_qos is not None and new_qos != old_qos:
        shown = (new.get("status") or {}).get("qosClass") or old_qos
        errors.append(FieldError("spec", f'Invalid value: "{shown}": {QOS_MESSAGE}'))
    ordering: list[FieldError] = []
    for key in _LISTS:
        olds, news = _containers(old_spec, key), _containers(new_spec, key)
        if len(olds) != len(news):
            ordering.append(FieldError(f"spec.{key}", f"Forbidden: {key} may not be added or removed on resize"))
            continue
        for i, (o, n) in enumerate(zip(olds, news, strict=True)):
            if not isinstance(n, dict) or not isinstance(o, dict) or n.get("name") != o.get("name"):
                ordering.append(FieldError(f"spec.{key}[{i}].name",
                                           f"Forbidden: {key} may not be renamed or reordered on resize"))
    if ordering:
        return errors + ordering
    for key in _LISTS:
        for i, (o, n) in enumerate(zip(_containers(old_spec, key), _containers(new_spec, key), strict=True)):
            res, old_res = n.get("resources") or {}, o.get("resources") or {}
            if key == "initContainers" and o.get("restartPolicy") != "Always":
                continue  # a regular init container: any change is refused below
            path = f"spec.{key}[{i}].resources"
            if _removed(res.get("requests"), old_res.get("requests")):
                errors.append(FieldError(f"{path}.requests", "Forbidden: resource requests cannot be removed"))
            if _removed(res.get("limits"), old_res.get("limits")):
                errors.append(FieldError(f"{path}.limits", "Forbidden: resource limits cannot be removed"))
    for o, n in zip(_containers(old_spec, "containers"), _containers(new_spec, "containers"), strict=True):
        if _without_cpu_memory(n, o) != _old_form(o):
            errors.append(FieldError("spec", "Forbidden: only cpu and memory resources are mutable"))
    for i, (o, n) in enumerate(zip(_containers(old_spec, "initContainers"),
                                   _containers(new_spec, "initContainers"), strict=True)):
        sidecar = o.get("restartPolicy") == "Always"
        if not sidecar and (_old_form(n) != _old_form(o) or n.get("resizePolicy") != o.get("resizePolicy")):
            errors.append(FieldError(f"spec.initContainers[{i}].resources",
                                     "Forbidden: resources for non-sidecar init containers are immutable"))
        elif sidecar and _without_cpu_memory(n, o) != _old_form(o):
            errors.append(FieldError("spec", "Forbidden: only cpu and memory resources for sidecar containers "
                                             "are mutable"))
    return errors
