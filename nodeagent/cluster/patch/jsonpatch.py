"""JSON patch (RFC 6902, `application/json-patch+json`) through the `jsonpatch` package.

The package does the pointer arithmetic and the six operations; this module adds what
kube-apiserver does around evanphx/json-patch: the patch must be a JSON array of objects (else
400), at most MAX_OPERATIONS operations, strict-decoding problems of the operations themselves
(`json patch unknown field "[0].foo"`, `json patch duplicate field "[1].path"`), and errors that
name the operation, its index and its path (422) without echoing the document (it may hold Secret
data). `test` compares as JSON does (true is not 1; 1 equals 1.0), which the package does not.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch as _jsonpatch
import jsonpointer

from nodeagent.cluster.patch.errors import UNPROCESSABLE, PatchError, shown
from nodeagent.cluster.schema.decode import Decoded

MAX_OPERATIONS = 10_000
OPERATION_FIELDS = frozenset({"op", "path", "value", "from"})
_OPERATIONS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


def operation_problems(body: Decoded) -> list[str]:
    """Strict-decoding problems of the operations: unknown and duplicate fields, in order."""
    ops = body.value
    if not isinstance(ops, list):
        return []
    out: list[str] = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            continue
        keys = body.key_order(op) or list(op)
        seen: set[str] = set()
        for key in keys:
            if key not in OPERATION_FIELDS:
                if key not in seen:
                    out.append(f'json patch unknown field "[{i}].{key}"')
            elif key in seen:
                out.append(f'json patch duplicate field "[{i}].{key}"')
            seen.add(key)
    return out


def json_patch(document: Any, operations: Any) -> Any:
    """The result of applying `operations` to `document` (neither is changed)."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a JSON array of operations")
    if len(operations) > MAX_OPERATIONS:
        raise PatchError(
            f"the allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {len(operations)}", UNPROCESSABLE
        )
    for i, op in enumerate(operations):
        if not isinstance(op, dict):
            raise PatchError(f"json patch operation at index {i} must be a JSON object, not {shown(op, 60)}")
    doc = copy.deepcopy(document)
    for i, op in enumerate(operations):
        doc = _apply_one(doc, op, i)
    return doc


def _apply_one(doc: Any, op: dict[str, Any], index: int) -> Any:
    name = op.get("op")
    where = f"json patch operation at index {index}"
    if not isinstance(name, str) or name not in _OPERATIONS:
        raise PatchError(
            f"{where}: unexpected kind: {shown(name, 60)} (want add, remove, replace, move, copy or test)",
            UNPROCESSABLE,
        )
    path = op.get("path")
    if not isinstance(path, str):
        raise PatchError(f"{where} ({name}): path must be a string", UNPROCESSABLE)
    if name in ("move", "copy") and not isinstance(op.get("from"), str):
        raise PatchError(f"{where} ({name} {path}): from must be a string", UNPROCESSABLE)
    if name in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"{where} ({name} {path}): missing value", UNPROCESSABLE)
    where = f"{where} ({name} {path})"
    try:
        if name == "test":
            _test(doc, path, op["value"], where)
            return doc
        return _jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
    except PatchError:
        raise
    except _jsonpatch.JsonPatchPathNotFound:
        raise PatchError(f"{where} does not apply: doc is missing path", UNPROCESSABLE) from None
    except jsonpointer.JsonPointerException as e:
        reason = "doc is missing path" if " not found in " in str(e) else str(e)
        raise PatchError(f"{where} does not apply: {reason}", UNPROCESSABLE) from None
    except _jsonpatch.JsonPatchException as e:  # conflicts and invalid operations: about the op, not the doc
        raise PatchError(f"{where} does not apply: {e}", UNPROCESSABLE) from None
    except (TypeError, KeyError, IndexError, AttributeError, ValueError):
        # the package on values it does not expect (a pointer into a scalar, ...)
        raise PatchError(f"{where} does not apply to this document", UNPROCESSABLE) from None


def _test(doc: Any, path: str, value: Any, where: str) -> None:
    try:
        current = jsonpointer.resolve_pointer(doc, path)
    except jsonpointer.JsonPointerException:
        raise PatchError(f"{where} does not apply: doc is missing path", UNPROCESSABLE) from None
    if not json_equal(current, value):
        raise PatchError(f"{where}: testing value {path} failed: test failed", UNPROCESSABLE)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: booleans are not numbers, 1 == 1.0, objects ignore key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
