"""The field set a create records, remembered by the created object's shape.

A create's managedFields entry holds every field of the new object (less what nobody owns and
what the kind's strategy resets): the walk, the strip and the difference behind it were a tenth of
a pod create's CPU, and again of every Event the scheduler writes. That set depends only on the
object's *shape*: the keys of its maps and structs all the way down, and its lists whole (a
list-map item's keys and a set's values are path elements). A scalar's value never matters (it is
a leaf, whatever it holds: typed.resolve looks only at whether a value is a dict, a list or
neither). So pods that differ by name, uid, label values or timestamps, and Events that differ by
their involved object and message, share one entry here, and the set (with its fieldsV1 text,
which FieldSet caches) is computed once per shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from nodeagent.cluster.patch.fieldpath import FieldSet
from nodeagent.cluster.schema.model import Schema


def shape(value: Any) -> Any:
    """`value` with every scalar below a map replaced by 0; lists are kept whole."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return value if isinstance(value, list) else 0


class ShapeMemo:
    """Field sets by (shape, ignored prefixes, schema); least recently used shapes go first."""

    SIZE = 512

    def __init__(self) -> None:
        self._sets: dict[tuple[bytes, tuple[str, ...]], tuple[Schema | None, FieldSet]] = {}

    def get(self, value: Any, schema: Schema | None, ignored: Sequence[str],
            compute: Callable[[], FieldSet]) -> FieldSet:
        """compute()'s set for `value`, from the memo when a value of the same shape was seen.
        compute() must be a pure function of the value's shape, `schema` and `ignored`."""
        try:
            key = (orjson.dumps(shape(value), option=orjson.OPT_SORT_KEYS), tuple(ignored))
        except (TypeError, RecursionError):  # beyond orjson (huge integers, depth): computed each time
            return compute()
        hit = self._sets.pop(key, None)
        if hit is None or hit[0] is not schema:
            hit = (schema, compute())  # an error (a list-map item without its key) is not remembered
            if len(self._sets) >= self.SIZE:
                del self._sets[next(iter(self._sets))]
        self._sets[key] = hit
        return hit[1]
