"""JSON merge patch (RFC 7386, `application/merge-patch+json`), as evanphx/json-patch applies it
for kube-apiserver.

Hand-written because it is a dozen lines over plain values; the PyPI packages for it either work
on strings or are unmaintained. RFC 7386: an object patch merges key by key, `null` removes a key,
any other patch value replaces the target. As upstream, a `null` patch is an error (400), and a
non-object patch replaces the whole document (with the nulls inside it pruned), which the API then
rejects when it is not an object of the kind.
"""

from __future__ import annotations

from typing import Any

from nodeagent.cluster.patch.errors import PatchError

MAX_DEPTH = 200


def merge_patch(target: Any, patch: Any) -> Any:
    """The result of applying `patch` to `target` (neither is changed)."""
    if patch is None:
        raise PatchError("invalid JSON Patch")
    return _apply(target, patch, 0)


def _apply(target: Any, patch: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise PatchError(f"merge patch nested deeper than {MAX_DEPTH} levels")
    if not isinstance(patch, dict):
        return _prune(patch, depth)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _apply(out.get(key), value, depth + 1)
    return out


def _prune(value: Any, depth: int) -> Any:
    """A patch value taken as it is, minus the nulls of its objects (as evanphx's pruneNulls)."""
    if depth > MAX_DEPTH:
        raise PatchError(f"merge patch nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {k: _prune(v, depth + 1) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v, depth + 1) for v in value]
    return value


def create_merge_patch(original: Any, modified: Any) -> Any:
    """A merge patch that turns `original` into `modified` (for clients and tests: the inverse of
    merge_patch where `modified` holds no nulls)."""
    if not isinstance(original, dict) or not isinstance(modified, dict):
        return modified
    patch: dict[str, Any] = {}
    for key in original:
        if key not in modified:
            patch[key] = None
    for key, value in modified.items():
        if key not in original:
            patch[key] = value
        elif original[key] != value or type(original[key]) is not type(value):
            if isinstance(original[key], dict) and isinstance(value, dict):
                patch[key] = create_merge_patch(original[key], value)
            else:
                patch[key] = value
    return patch
