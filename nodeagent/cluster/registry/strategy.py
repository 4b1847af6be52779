"""A kind's strategy: what the generic store asks of each kind (kube-apiserver's rest strategies).

The base class is what most kinds need: ObjectMeta validation, status kept apart from spec when
the kind has a status subresource, generation bumped on spec changes, Name/Age columns,
metadata.name/namespace as field-selector attributes. A kind overrides what differs (defaulting,
validation, columns, field attributes, graceful deletion, conversion between the served version and
the stored one). Strategies are pure: objects in, objects or FieldErrors out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.table import DEFAULT_COLUMNS, Column, name_age
from nodeagent.core.errors import FieldError
from nodeagent.core.jsoncopy import json_copy
from nodeagent.core.names import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    invalid,
    label_value_errors,
    qualified_name_errors,
)

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
# ObjectMeta fields a client may send; the server owns the others and overwrites them.
SERVER_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation", "selfLink",
                   "deletionTimestamp", "deletionGracePeriodSeconds")
Obj = dict[str, Any]


def path_segment_name_errors(name: str) -> list[str]:
    """ValidatePathSegmentName (RBAC objects): anything but `.`, `..`, `/` and `%`."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def label_errors(path: str, labels: object) -> list[FieldError]:
    if labels is None:
        return []
    if not _is_str_map(labels):
        return [FieldError(path, invalid(_short(labels), "must be a map of string keys to string values"))]
    assert isinstance(labels, dict)
    errs = []
    for k, v in labels.items():
        if e := qualified_name_errors(k):
            errs.append(FieldError(path, invalid(k, "; ".join(e))))
        if e := label_value_errors(v):
            errs.append(FieldError(f"{path}[{k}]", invalid(v, "; ".join(e))))
    return errs


def annotation_errors(path: str, annotations: object) -> list[FieldError]:
    if annotations is None:
        return []
    if not _is_str_map(annotations):
        return [FieldError(path, invalid(_short(annotations), "must be a map of string keys to string values"))]
    assert isinstance(annotations, dict)
    errs = [FieldError(path, invalid(k, "; ".join(e)))
            for k in annotations if (e := qualified_name_errors(k.lower()))]
    total = sum(len(k) + len(v) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(FieldError(path, f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"))
    return errs


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 64 else text[:61] + "..."


def owner_reference_errors(refs: object) -> list[FieldError]:
    if refs is None:
        return []
    if not isinstance(refs, list):
        return [FieldError("metadata.ownerReferences", invalid(_short(refs), "must be a list"))]
    errs = []
    controllers = 0
    for i, ref in enumerate(refs):
        p = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            errs.append(FieldError(p, invalid(_short(ref), "must be an object")))
            continue
        for f in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref.get(f), str) or not ref.get(f):
                errs.append(FieldError(f"{p}.{f}", f"Invalid value: \"\": {f} must not be empty"))
        for f in ("controller", "blockOwnerDeletion"):
            if f in ref and ref[f] is not None and not isinstance(ref[f], bool):
                errs.append(FieldError(f"{p}.{f}", invalid(_short(ref[f]), "must be a boolean")))
        if ref.get("controller") is True:
            controllers += 1
    if controllers > 1:
        errs.append(FieldError("metadata.ownerReferences", "Invalid value: only one reference can have "
                                                           "Controller set to true"))
    return errs


def finalizer_errors(finalizers: object) -> list[FieldError]:
    if finalizers is None:
        return []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        return [FieldError("metadata.finalizers", invalid(_short(finalizers), "must be a list of strings"))]
    errs = []
    for i, f in enumerate(finalizers):
        if e := qualified_name_errors(f):
            errs.append(FieldError(f"metadata.finalizers[{i}]", invalid(f, "; ".join(e))))
    if len(set(finalizers)) != len(finalizers):
        errs.append(FieldError("metadata.finalizers", "Duplicate value: finalizers must be unique"))
    return errs


class Strategy:
    """The defaults; subclasses set `info` and override what their kind does differently."""

    info: ClassVar[ResourceInfo]
    has_status: ClassVar[bool] = False  # a `status` subresource: spec and status updates reset each other
    allow_create_on_update: ClassVar[bool] = False
    allow_unconditional_update: ClassVar[bool] = True
    return_deleted_object: ClassVar[bool] = False
    columns: ClassVar[tuple[Column, ...]] = DEFAULT_COLUMNS
    field_labels: ClassVar[frozenset[str]] = frozenset()  # beyond metadata.name / metadata.namespace
    name_errors: ClassVar[Any] = staticmethod(dns1123_subdomain_errors)
    generation: ClassVar[bool] = False  # metadata.generation kept (1 on create, +1 on spec changes)
    subresource_names: ClassVar[tuple[str, ...]] = ()  # beyond status: e.g. namespaces/finalize
    spec_subresources: ClassVar[tuple[str, ...]] = ()  # subresources whose spec changes bump the generation (scale)
    # subresources whose writes leave metadata.managedFields as they are: upstream writes them to
    # the storage directly, not through the field manager (pods/binding: BindingREST's GuaranteedUpdate)
    unmanaged_subresources: ClassVar[tuple[str, ...]] = ()

    # ---- create / update -----------------------------------------------------------------------
    def default(self, obj: Obj) -> None:
        """Fill in defaults in place (after prepare_*, before validation)."""

    def prepare_for_create(self, obj: Obj) -> None:
        """Clear what a client may not set on create (status for kinds with a status subresource)."""
        if self.has_status:
            obj.pop("status", None)
            if (status := self.initial_status(obj)) is not None:
                obj["status"] = status

    def initial_status(self, obj: Obj) -> Obj | None:
        return None

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """A spec update: the status stays as it was."""
        if self.has_status:
            if "status" in old:
                new["status"] = json_copy(old["status"])
            else:
                new.pop("status", None)

    def prepare_for_status_update(self, new: Obj, old: Obj) -> Obj:
        """A status update: everything but status (and labels/annotations/owners/finalizers) stays.
        The result shares the old object's other parts (spec: a pod's is most of it), which a
        status update never changes; its top level and metadata are its own."""
        out = {**old, "metadata": dict(old["metadata"])}
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        meta, new_meta = out["metadata"], new.get("metadata") or {}
        for k in ("labels", "annotations", "ownerReferences", "finalizers"):
            if k in new_meta:
                meta[k] = new_meta[k]
            else:
                meta.pop(k, None)
        return out

    def prepare_for_subresource_update(self, subresource: str, new: Obj, old: Obj) -> Obj:
        """An update through a subresource other than status (namespaces/finalize)."""
        raise NotImplementedError(subresource)

    def held(self, obj: Mapping[str, Any]) -> bool:
        """Whether a deleted object stays beyond its metadata.finalizers (a namespace's spec.finalizers)."""
        return False

    def spec_of(self, obj: Mapping[str, Any]) -> Any:
        """What a generation bump compares: everything but metadata and status."""
        return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}

    # ---- validation ----------------------------------------------------------------------------
    def validate(self, obj: Obj) -> list[FieldError]:
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return self.validate(new)

    def validate_status_update(self, new: Obj, old: Obj) -> list[FieldError]:
        return []

    def validate_meta(self, obj: Obj, *, generate_name: bool = False) -> list[FieldError]:
        meta = obj["metadata"]
        errs: list[FieldError] = []
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            errs.append(FieldError("metadata.name", "Required value: name or generateName is required"))
        else:
            errs += [FieldError("metadata.generateName" if generate_name else "metadata.name", invalid(name, e))
                     for e in self.name_errors(name)]
        if self.info.namespaced:
            ns = meta.get("namespace")
            if not isinstance(ns, str) or not ns:
                errs.append(FieldError("metadata.namespace", "Required value"))
            else:
                errs += [FieldError("metadata.namespace", invalid(ns, e)) for e in dns1123_label_errors(ns)]
        errs += label_errors("metadata.labels", meta.get("labels"))
        errs += annotation_errors("metadata.annotations", meta.get("annotations"))
        errs += owner_reference_errors(meta.get("ownerReferences"))
        errs += finalizer_errors(meta.get("finalizers"))
        return errs

    # ---- reading -------------------------------------------------------------------------------
    def fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """Field-selector attributes (metadata.name, metadata.namespace, and the kind's own)."""
        meta = obj.get("metadata") or {}
        out = {"metadata.name": str(meta.get("name", ""))}
        if self.info.namespaced:
            out["metadata.namespace"] = str(meta.get("namespace", ""))
        return out

    def cells(self, obj: Mapping[str, Any], now_wall: float) -> list[Any]:
        return name_age(obj, now_wall)

    # ---- deletion ------------------------------------------------------------------------------
    def delete_refused(self, name: str) -> str | None:
        """Why this object may never be deleted (403 Forbidden `<resource> "<name>" is forbidden:
        <why>`), or None; checked before preconditions and admission, as kube's admission does."""
        return None

    def delete_grace(self, obj: Mapping[str, Any], requested: int | None) -> int:
        """Seconds of graceful deletion (the object stays with deletionTimestamp); 0: at once."""
        return 0

    def on_deleting(self, obj: Obj) -> None:
        """The object got its deletionTimestamp and stays (finalizers, grace): e.g. Terminating."""

    # ---- versions ------------------------------------------------------------------------------
    def to_storage(self, obj: Obj) -> Obj:
        """The served version -> the stored one (identity unless the kind shares storage); must not
        change `obj` (the store encodes the result and keeps using `obj`)."""
        return obj

    def from_storage(self, obj: Obj) -> Obj:
        return obj


def text(value: object) -> str:
    """A cell from an optional value: "" for None, "<none>" is up to the caller."""
    return "" if value is None else str(value)


def get_path(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur
