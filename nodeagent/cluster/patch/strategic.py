"""Strategic merge patch (`application/strategic-merge-patch+json`) as apimachinery applies it.

Semantics follow k8s.io/apimachinery pkg/util/strategicpatch (StrategicMergeMapPatch, i.e. the
server side: parallel lists merged, unmatched nulls ignored), with merge keys and strategies read
from the schema (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`):
- maps merge key by key; `null` deletes; `$patch: replace` replaces the map with the patch,
  `$patch: delete` empties it; any other `$patch` in a map is an error;
- `$retainKeys: [..]` clears the keys of the original not listed (every non-null patch key must be
  listed);
- lists whose strategy is `merge` merge: lists of maps by merge key (items `{$patch: delete, key: v}`
  delete every match, an item `{$patch: replace}` makes the other items the whole list,
  `{$patch: merge}` is an error), lists of scalars as a set; every other list is replaced (atomic);
- `$deleteFromPrimitiveList/<f>: [..]` removes those scalars from the merging list `f`;
- `$setElementOrder/<f>: [..]` orders the merged list `f` (the patch's items must appear in it in the
  same relative order); without it, items in the patch come in patch order and the others keep their
  place relative to them, as upstream's mergeSortedSlice does;
- values of different JSON kinds (a map patched with a list, a scalar with a map) are replaced.
Deliberate differences, where upstream's behaviour is an accident of Go:
- keys are processed in a fixed order (upstream iterates a Go map: random): plain keys first, then
  `$deleteFromPrimitiveList` lists;
- a patch subtree the original lacks is merged into an empty value instead of stored as sent, so its
  own directives are applied (upstream would store `$patch` or `$setElementOrder/...` keys, which
  strict decoding then reports as unknown fields); a `$deleteFromPrimitiveList` for a list the
  original lacks is a no-op (upstream stores the deletion list as the list);
- numbers compare as JSON numbers (1 and 1.0 are the same, true is not 1), as Go's float64 do.
Errors name the problem (PatchError; 400 for a malformed patch, 422 for lists of lists).
"""

from __future__ import annotations

import copy
from typing import Any

from nodeagent.cluster.patch.errors import UNPROCESSABLE, PatchError, kind_of, shown
from nodeagent.cluster.schema.model import Schema, Shape

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"
SET_ELEMENT_ORDER = "$setElementOrder"
MAX_DEPTH = 200


def strategic_merge_patch(original: Any, patch: Any, schema: Schema | None) -> dict[str, Any]:
    """The result of applying `patch` to `original` (neither is changed)."""
    if not isinstance(patch, dict):
        raise PatchError(f"a strategic merge patch must be a JSON object, not a {kind_of(patch)}")
    if original is not None and not isinstance(original, dict):
        raise PatchError("invalid JSON document")
    base: dict[str, Any] = copy.deepcopy(original) if original is not None else {}
    return _merge_map(base, copy.deepcopy(patch), schema, 0)


# ---- schema lookups ----


def _child(schema: Schema | None, key: str) -> Schema | None:
    if schema is None:
        return None
    shape = schema.shape
    if shape == Shape.STRUCT:
        return schema.field(key)
    if shape == Shape.MAP:
        return schema.additional
    return None


def _items(schema: Schema | None) -> Schema | None:
    """The schema of a list's items. A merging field whose schema is not a list describes its
    items itself (upstream's OpenAPI lookup does the same for pointer lists)."""
    if schema is None:
        return None
    return schema.items if schema.shape == Shape.LIST else schema


def _strategy(schema: Schema | None) -> tuple[str, str | None]:
    """(strategy other than retainKeys, merge key) of a field."""
    if schema is None:
        return "", None
    strategies = [s for s in schema.patch_strategies if s != "retainKeys"]
    if len(strategies) > 1:
        raise PatchError(f"unexpected patch strategy: {','.join(schema.patch_strategies)}")
    return (strategies[0] if strategies else ""), schema.patch_merge_key


# ---- scalar identity as Go's interface{} comparison sees JSON values ----


def _ident(value: Any) -> tuple[str, Any]:
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z", None)
    return ("o", id(value))  # maps and lists are never equal as scalars


def _category(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return _ident(value)[0]


def _element_kind(*lists: list[Any]) -> str | None:
    """The one kind of every element ("map", or a scalar kind), None when all are empty."""
    kind: str | None = None
    for items in lists:
        for v in items:
            c = _category(v)
            if c == "list":
                raise PatchError("lists of lists are not supported", UNPROCESSABLE)
            if kind is None:
                kind = c
            elif kind != c:
                raise PatchError(f"list element types are not identical: {shown(list(lists))}")
    return kind


# ---- maps ----


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: Schema | None, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise PatchError(f"patch nested deeper than {MAX_DEPTH} levels")
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            del patch[DIRECTIVE]
            return patch
        if directive == "delete":
            return {}
        raise PatchError(f"unknown patch type: {shown(directive)} in map: {shown(patch)}")
    _retain_keys(original, patch)
    _set_element_orders(original, patch, schema, depth)
    deletions: list[tuple[str, Any]] = []
    for key, value in patch.items():
        if key.startswith(DELETE_FROM_PRIMITIVE_LIST):
            deletions.append((_suffix(key, DELETE_FROM_PRIMITIVE_LIST, "primitive list"), value))
            continue
        if value is None:
            original.pop(key, None)
            continue
        child = _child(schema, key)
        if key not in original:
            original[key] = _fresh(value, child, depth)
            continue
        original[key] = _merge_value(original[key], value, child, False, depth)
    for key, value in deletions:
        if key in original and value is not None:
            original[key] = _merge_value(original[key], value, _child(schema, key), True, depth)
    return original


def _fresh(value: Any, schema: Schema | None, depth: int) -> Any:
    """A patch value for a key the original lacks: merged into an empty value of its kind."""
    if isinstance(value, dict):
        return _merge_map({}, value, schema, depth + 1)
    if isinstance(value, list):
        strategy, merge_key = _strategy(schema)
        if strategy == "merge":
            return _merge_list([], value, _items(schema), merge_key, False, depth)
    return value


def _merge_value(original: Any, patch: Any, schema: Schema | None, delete_list: bool, depth: int) -> Any:
    if isinstance(original, dict) and isinstance(patch, dict):
        strategy, _ = _strategy(schema)
        if strategy == "replace":
            return patch
        return _merge_map(original, patch, schema, depth + 1)
    if isinstance(original, list) and isinstance(patch, list):
        strategy, merge_key = _strategy(schema)
        if strategy == "merge" or delete_list:  # a deletion list applies whatever the strategy
            return _merge_list(original, patch, _items(schema), merge_key, delete_list, depth)
        return patch
    if delete_list:
        if not isinstance(patch, list):
            raise PatchError("invalid patch format of primitive list")
        return original  # a deletion list for something that is not a list: nothing to delete
    return patch


def _suffix(key: str, prefix: str, what: str) -> str:
    head, sep, tail = key.partition("/")
    if not sep or head != prefix:
        raise PatchError(f"invalid patch format of {what}")
    return tail


def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS not in patch:
        return
    retained = patch.pop(RETAIN_KEYS)
    if not isinstance(retained, list):
        raise PatchError("invalid patch format of retainKeys")
    keep = {k for k in retained if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key.startswith((DELETE_FROM_PRIMITIVE_LIST, SET_ELEMENT_ORDER)):
            continue
        if key not in keep:
            raise PatchError(f"invalid patch format of retainKeys: {shown(key)} is in the patch but not in $retainKeys")
    for key in [k for k in original if k not in keep]:
        del original[key]


# ---- lists ----


def _merge_key_value(item: Any, merge_key: str) -> Any:
    if not isinstance(item, dict):
        raise PatchError(f"expected a map, but received a {kind_of(item)}")
    if merge_key not in item:
        raise PatchError(f"map: {shown(item)} does not contain declared merge key: {merge_key}")
    return item[merge_key]


def _find(items: list[Any], merge_key: str, value: Any, by_ident: bool = False) -> int:
    want = value if by_ident else _ident(value)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PatchError(f"value for key {i} is not a map.")
        if merge_key in item and _ident(item[merge_key]) == want:
            return i
    return -1


def _merge_list(
    original: list[Any],
    patch: list[Any],
    item_schema: Schema | None,
    merge_key: str | None,
    delete_list: bool,
    depth: int,
) -> list[Any]:
    return _merge_list_view(original, patch, item_schema, merge_key, delete_list, depth)[0]


def _merge_list_view(
    original: list[Any],
    patch: list[Any],
    item_schema: Schema | None,
    merge_key: str | None,
    delete_list: bool,
    depth: int,
) -> tuple[list[Any], list[Any]]:
    """The merged list, and what the caller's `original` reads afterwards.

    Upstream merges lists of maps in place on the original's Go slice: deleting an item shifts the
    rest left inside the same array (its last slot keeps a stale copy), and appending a new item
    fills a freed slot while there is one. The $setElementOrder step then orders by that array, so
    the second value reproduces it (the original's capacity is its length, as the API server's
    unstructured converter makes it), and the resulting order matches upstream's.
    """
    if depth > MAX_DEPTH:
        raise PatchError(f"patch nested deeper than {MAX_DEPTH} levels")
    if not original and not patch:
        return original, original
    kind = _element_kind(original, patch)
    if kind != "map":
        if delete_list:
            gone = {_ident(v) for v in patch}
            return [v for v in original if _ident(v) not in gone], original
        merged = _unique(original + patch)
        return _order(merged, patch, original, None), original
    if not merge_key:
        raise PatchError("cannot merge lists without merge key for type map")
    backing = list(original)  # the Go array behind the caller's slice
    current = list(original)
    plain: list[Any] = []
    replace = False
    for item in patch:
        if not isinstance(item, dict) or DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[DIRECTIVE]
        if directive == "delete":
            want = _ident(_merge_key_value(item, merge_key))
            while (k := _find(current, merge_key, want, by_ident=True)) >= 0:
                n = len(current)
                del current[k]
                backing[k : n - 1] = backing[k + 1 : n]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(f"unknown patch type: {shown(directive)} in map: {shown(item)}")
    if replace:
        for item in plain:
            _merge_key_value(item, merge_key)
        return _order(plain, [], plain, merge_key), backing
    server_order = list(current)  # upstream's slice header: items appended below are not in it
    attached = True  # appends write into the caller's array until it is full
    for item in plain:
        k = _find(current, merge_key, _ident(_merge_key_value(item, merge_key)), by_ident=True)
        if k >= 0:
            current[k] = _merge_map(current[k], item, item_schema, depth + 1)
            if attached:
                backing[k] = current[k]
        else:
            n = len(current)
            current.append(item)
            if attached and n < len(backing):
                backing[n] = item
            else:
                attached = False
    return _order(current, plain, server_order, merge_key), backing


def _unique(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for v in values:
        key = _ident(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _position(order: list[Any], item: Any, merge_key: str | None) -> int:
    """Index of `item` in `order` (by merge key value for maps), -1 when absent."""
    want = _ident(item[merge_key]) if merge_key is not None and isinstance(item, dict) else _ident(item)
    for i, v in enumerate(order):
        got = _ident(v.get(merge_key)) if merge_key is not None and isinstance(v, dict) else _ident(v)
        if got == want:
            return i
    return -1


def _order(merged: list[Any], patch_order: list[Any], server_order: list[Any], merge_key: str | None) -> list[Any]:
    """Upstream's normalizeElementOrder: the items named in `patch_order` sorted by it, the others
    by `server_order`, then interleaved keeping both relative orders."""
    if merge_key is not None:
        for item in [*merged, *patch_order]:
            _merge_key_value(item, merge_key)
    in_patch = [v for v in merged if _position(patch_order, v, merge_key) >= 0]
    server_only = [v for v in merged if _position(patch_order, v, merge_key) < 0]
    if merge_key is not None:  # items deleting themselves go last, as upstream's extractToDeleteItems
        deleting = [v for v in in_patch if v.get(DIRECTIVE) == "delete"]
        in_patch = [v for v in in_patch if v.get(DIRECTIVE) != "delete"]
    else:
        deleting = []
    in_patch.sort(key=lambda v: _position(patch_order, v, merge_key))
    in_patch += deleting
    server_only.sort(key=lambda v: p if (p := _position(server_order, v, merge_key)) >= 0 else len(server_order))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(in_patch):
        if i >= len(server_only):
            out.append(in_patch[j])
            j += 1
        elif j >= len(in_patch):
            out.append(server_only[i])
            i += 1
        else:
            left = _position(server_order, server_only[i], merge_key)
            right = _position(server_order, in_patch[j], merge_key)
            if left >= 0 and right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(in_patch[j])
                j += 1
    return out


def _set_element_orders(original: dict[str, Any], patch: dict[str, Any], schema: Schema | None, depth: int) -> None:
    for key in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
        order = patch.pop(key)
        if not isinstance(order, list):
            raise PatchError(f"expected a list, but received a {kind_of(order)}")
        field = _suffix(key, SET_ELEMENT_ORDER, "setElementOrder list")
        has_original, has_patch = field in original, field in patch
        original_list = original.get(field)
        patch_list = patch.get(field)
        if has_original and not isinstance(original_list, list):
            raise PatchError(f"expected a list, but received a {kind_of(original_list)}")
        if has_patch and patch_list is not None and not isinstance(patch_list, list):
            raise PatchError(f"expected a list, but received a {kind_of(patch_list)}")
        child = _child(schema, field)
        strategy, merge_key = _strategy(child)
        _check_order(patch_list or [], order, merge_key)
        server_order = original_list or []
        merged: Any
        if has_original and has_patch and patch_list is not None:
            if strategy == "merge" and isinstance(original_list, list):
                items = _items(child)
                merged, server_order = _merge_list_view(original_list, patch_list, items, merge_key, False, depth)
            else:
                merged = patch_list
        elif has_original:
            merged = original_list
        elif has_patch and patch_list is not None:
            merged = _fresh(patch_list, child, depth)
        else:
            continue
        patch.pop(field, None)
        if not merged:
            original[field] = merged
            continue
        kind = _element_kind(merged)
        key_for_order = merge_key if kind == "map" else None
        original[field] = _order(merged, order, server_order, key_for_order)


def _check_order(patch_list: list[Any], order: list[Any], merge_key: str | None) -> None:
    """The patch's items (deletions aside) must appear in `order` in the same relative order."""
    if not patch_list or not order:
        return
    items = [v for v in patch_list if not (merge_key and isinstance(v, dict) and v.get(DIRECTIVE) == "delete")]
    i = j = 0
    while i < len(items) and j < len(order):
        item = items[i]
        if isinstance(item, dict) and DIRECTIVE in item:
            i += 1
            continue
        if merge_key:
            same = _ident(_merge_key_value(item, merge_key)) == _ident(_merge_key_value(order[j], merge_key))
        else:
            same = _ident(item) == _ident(order[j])
        if same:
            i += 1
        j += 1
    if i < len(items):
        raise PatchError(
            f"the order in patch list: {shown(patch_list)} doesn't match $setElementOrder list: {shown(order)}"
        )
