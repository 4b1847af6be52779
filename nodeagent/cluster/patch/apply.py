"""Server-side apply and the field ownership every write records (`metadata.managedFields`).

Semantics are structured-merge-diff's Updater as kube-apiserver's field manager drives it:
- `apply(live, config, ...)`: the configuration is merged into the live object along the schema
  (granular maps and structs merge, list-maps merge by key, sets by value, atomic values are
  replaced); the applier's entry becomes exactly the fields the configuration sets; fields the
  applier set last time and no longer sets are removed, unless another manager owns them; a field
  the apply changes (or adds) that another manager owns is a conflict, raised with every
  conflicting manager and path (409, causes FieldManagerConflict) unless `force`, which takes
  ownership from them; fields the apply removes leave every manager.
- `update(live, new, ...)`: a create, update or non-apply patch by a named field manager: it
  gains the fields it changed or added (merged with what it owned before), other managers lose
  them, and fields it removed leave every manager. Never a conflict.
Both strip the fields nobody owns (apiVersion, kind, metadata.name, namespace, uid,
resourceVersion, generation, creationTimestamp, managedFields ...), skip `ignored` field prefixes
(what the kind's strategy resets, e.g. `status` for the main resource), stamp `now` on the entry
of a write that changed something, and cap Update entries at ten. Pure: `now` is the caller's
RFC 3339 time (from the injectable clock).
Differences: where removing fields empties a map or struct, it disappears (upstream's walk leaves a
JSON null there, which the typed conversion of a built-in kind then drops: the same stored object);
a create records the parents it adds as owned (see docs/architecture.md). Not done: apiVersion
conversion between managers' versions (each kind is served at one version), and the
`kubectl.kubernetes.io/last-applied-configuration` annotation (kubectl's client-side apply keeps it).
Checked locally (not in CI: it reads upstream's Go test sources) against structured-merge-diff's
merge tests: of the 62 single-version cases, 59 give upstream's object and conflicts, the other 3
differ only by those nulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.cluster.patch.errors import CONFLICT, PatchError
from nodeagent.cluster.patch.fieldpath import EMPTY, FieldSet, Path, PathElement, path_string
from nodeagent.cluster.patch.managedfields import (
    APPLY,
    UPDATE,
    ManagedEntry,
    ManagerKey,
    Managers,
    decode_managed_fields,
    encode_managed_fields,
)
from nodeagent.cluster.patch.shapememo import ShapeMemo
from nodeagent.cluster.patch.typed import (
    ABSENT,
    check,
    compare,
    ensure_named_fields_are_members,
    field_set,
    merge,
    remove_items,
    strip,
)
from nodeagent.cluster.schema.model import Schema
from nodeagent.core.errors import FieldError
from nodeagent.core.jsoncopy import json_copy

_F = PathElement.field
NEVER_OWNED = FieldSet.of(
    (_F("apiVersion"),),
    (_F("kind"),),
    (_F("metadata"),),
    *(
        (_F("metadata"), _F(name))
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    ),
)


@dataclass(frozen=True, slots=True)
class Conflict:
    manager: str  # as kube-apiserver shows it: `"kubectl"`, `"x" using v1`
    field: str  # `.spec.replicas`, `.spec.containers[name="c"].image`

    def cause(self) -> dict[str, str]:
        return {"reason": "FieldManagerConflict", "message": f"conflict with {self.manager}", "field": self.field}


class ApplyConflict(PatchError):
    """Fields the apply would change that other managers own (409 Conflict)."""

    def __init__(self, conflicts: Sequence[Conflict]) -> None:
        self.conflicts = list(conflicts)
        super().__init__(_conflict_message(self.conflicts), CONFLICT)

    def causes(self) -> list[dict[str, str]]:
        return [c.cause() for c in self.conflicts]


def _conflict_message(conflicts: Sequence[Conflict]) -> str:
    if len(conflicts) == 1:
        return f"Apply failed with 1 conflict: conflict with {conflicts[0].manager}: {conflicts[0].field}"
    by_manager: dict[str, list[str]] = {}
    for c in conflicts:
        by_manager.setdefault(c.manager, []).append(c.field)
    lines = []
    for manager in sorted(by_manager):
        lines.append(f"conflicts with {manager}:")
        lines.extend(f"- {f}" for f in by_manager[manager])
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def _prefixes(ignored: Sequence[str]) -> list[Path]:
    return [tuple(_F(part) for part in dotted.split(".")) for dotted in ignored if dotted]


def _without_managed_fields(obj: Any) -> Any:
    """A shallow copy without metadata.managedFields (nothing below is changed here)."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _managers(obj: Any) -> Managers:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    raw = meta.get("managedFields") if isinstance(meta, dict) else None
    return decode_managed_fields(raw)


def _with_managed_fields(obj: dict[str, Any], managers: Managers) -> dict[str, Any]:
    entries = encode_managed_fields(managers)
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise FieldError("metadata", "must be an object")
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)
    return obj


def _own(managers: Managers, key: ManagerKey, fields: FieldSet, api_version: str, time: str | None) -> None:
    fields = fields.difference(NEVER_OWNED)
    if fields.empty:
        managers.pop(key, None)
    else:
        managers[key] = ManagedEntry(fields, api_version, time)


def _transfer(
    live: Any,
    new: Any,
    schema: Schema | None,
    managers: Managers,
    key: ManagerKey | None,
    ignored: list[Path],
    force: bool,
) -> tuple[FieldSet, FieldSet]:
    """Take the fields `new` changes from every manager but `key` (conflicts unless force) and
    drop the fields it removes from them all; returns (modified or added, removed)."""
    added, modified, removed = compare(live, new, schema)
    changed = strip(added.union(modified), ignored)
    removed = strip(removed, ignored)
    conflicts: dict[ManagerKey, FieldSet] = {}
    for other, entry in managers.items():
        if other == key:
            continue
        taken = entry.fields.intersection(changed)
        if not taken.empty:
            conflicts[other] = taken
    if conflicts and not force:
        raise ApplyConflict(
            [
                Conflict(other.display(managers[other].api_version), path_string(path))
                for other in sorted(conflicts)
                for path in conflicts[other].paths()
            ]
        )
    for other in list(managers):
        if other == key:
            continue
        entry = managers[other]
        fields = entry.fields.difference(conflicts.get(other, EMPTY)).difference(removed)
        if fields.empty:
            del managers[other]
        elif fields != entry.fields:
            managers[other] = ManagedEntry(fields, entry.api_version, entry.time)
    return changed, removed


def apply(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    schema: Schema | None,
    *,
    manager: str,
    api_version: str,
    now: str,
    force: bool = False,
    subresource: str = "",
    ignored: Sequence[str] = (),
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: the apply creates it), with
    its managedFields. Raises ApplyConflict, PatchError (a configuration that cannot be merged)
    or FieldError (managedFields of the live object that cannot be read)."""
    if not isinstance(config, dict):
        raise PatchError("an apply configuration must be a JSON object")
    prefixes = _prefixes(ignored)
    managers = _managers(live) if live is not None else {}
    live_obj: Any = _without_managed_fields(live) if live is not None else ABSENT
    cfg = _without_nulls(_without_managed_fields(config))
    check(cfg, schema)
    key = ManagerKey.of(manager, APPLY, api_version, subresource)
    merged = merge(live_obj, cfg, schema)
    last = managers.get(key)
    applied = strip(field_set(cfg, schema), prefixes)
    managers[key] = ManagedEntry(applied, api_version, last.time if last is not None else None)
    if last is not None and not last.fields.difference(applied).empty:
        merged = _prune(merged, managers, last.fields, schema)  # it stopped setting something
    _transfer(live_obj, merged, schema, managers, key, prefixes, force)
    changed = live_obj is ABSENT or merged != live_obj
    entry = managers[key]
    _own(managers, key, entry.fields, api_version, now if changed else entry.time)
    result = json_copy(merged if changed else live_obj)  # the live object's parts are not shared
    return _with_managed_fields(result, managers)


def _prune(merged: Any, managers: Managers, last: FieldSet, schema: Schema | None) -> Any:
    """Remove what the applier set last time and not now, unless another manager owns it
    (upstream's prune, addBackOwnedItems and addBackDanglingItems)."""
    pruned = remove_items(merged, ensure_named_fields_are_members(last, schema), schema)
    managed = EMPTY
    for entry in managers.values():
        managed = managed.union(entry.fields)
    merged_set = ensure_named_fields_are_members(field_set(merged, schema), schema)
    pruned_set = ensure_named_fields_are_members(field_set(pruned, schema), schema)
    keep = pruned_set.union(ensure_named_fields_are_members(managed, schema))
    pruned = remove_items(merged, merged_set.difference(keep), schema)
    pruned_set = ensure_named_fields_are_members(field_set(pruned, schema), schema)
    dangling = merged_set.difference(pruned_set).intersection(ensure_named_fields_are_members(last, schema))
    return remove_items(merged, dangling, schema)


def update(
    live: dict[str, Any] | None,
    new: dict[str, Any],
    schema: Schema | None,
    *,
    manager: str,
    api_version: str,
    now: str,
    subresource: str = "",
    ignored: Sequence[str] = (),
) -> dict[str, Any]:
    """`new` (what a create, update or non-apply patch will store) with the managedFields that
    record `manager`'s write. As upstream: managed fields the client sent in `new` replace the
    live ones when they can be read and are not empty (not on a subresource); `[{}]` clears them."""
    prefixes = _prefixes(ignored)
    sent = (new.get("metadata") or {}).get("managedFields") if isinstance(new.get("metadata"), dict) else None
    clear = sent == [{}]
    managers: Managers = {}
    if not clear and not subresource:
        try:
            managers = _managers(new)
        except FieldError:
            managers = {}
    if not managers and not clear:
        try:
            managers = _managers(live) if live is not None else {}
        except FieldError:
            managers = {}  # unreadable managedFields are reset, as upstream does on update
    live_obj: Any = _without_managed_fields(live) if live is not None else ABSENT
    new_obj = _without_managed_fields(new)
    if new_obj is new:  # the result's top level and metadata are its own; below, `new` is the caller's to give
        new_obj = dict(new)
        if isinstance(new.get("metadata"), dict):
            new_obj["metadata"] = dict(new["metadata"])
    key = ManagerKey.of(manager, UPDATE, api_version, subresource)
    top = [p[0].text for p in prefixes if len(p) == 1]  # ignored whole (`spec` of a status write): not compared
    if live is None and not managers:  # a create: no manager to take fields from, a set by the object's shape
        created = _without(new_obj, top)
        owned = _CREATED.get(created, schema, ignored, lambda: _created_fields(created, schema, prefixes))
    else:
        changed, _ = _transfer(_without(live_obj, top), _without(new_obj, top), schema, managers, None, prefixes,
                               force=True)
        owned = changed.difference(NEVER_OWNED)
    if not owned.empty:
        previous = managers.get(key)
        fields = owned if previous is None else owned.union(previous.fields)
        _own(managers, key, fields, api_version, now)
    return _with_managed_fields(new_obj, managers)


def _created_fields(new: Any, schema: Schema | None, prefixes: list[Path]) -> FieldSet:
    """What _transfer gives a create that no manager owned anything of (less NEVER_OWNED)."""
    added, modified, _ = compare(ABSENT, new, schema)
    return strip(added.union(modified), prefixes).difference(NEVER_OWNED)


_CREATED = ShapeMemo()


def _without(obj: Any, keys: Sequence[str]) -> Any:
    """A shallow copy without these top-level fields (their paths are stripped anyway: comparing
    them, a pod's whole spec on every status write, was most of an update's field manager cost)."""
    if not keys or not isinstance(obj, dict) or not any(k in obj for k in keys):
        return obj
    return {k: v for k, v in obj.items() if k not in keys}
