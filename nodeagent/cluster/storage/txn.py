"""A transaction's evaluation: compares, then one branch of ops, against a view of the keys.

Pure: it reads the state through `lookup` and returns what the transaction does (its responses
and its events); the backends decide when the events become visible and durable. Every backend
evaluates through here, so CAS semantics are written once and table-tested (tests/test_storage_txn.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nodeagent.cluster.storage.interface import Compare, DeleteKey, Event, Get, KeyValue, Op, Put

Lookup = Callable[[str], "KeyValue | None"]

# A txn may write at most this many keys: the log's row id packs (revision, write index) into one
# integer (see logdb.py); etcd's default limit is 128 ops per txn.
MAX_WRITES = 1 << 20


@dataclass(frozen=True, slots=True)
class Outcome:
    succeeded: bool
    responses: tuple[KeyValue | None, ...]
    events: tuple[Event, ...]  # empty: the transaction wrote nothing and takes no revision


def tombstone(key: str, revision: int) -> KeyValue:
    """The kv of a DELETE event, etcd's shape: the deletion's revision, no value, no version."""
    return KeyValue(key, b"", 0, revision, 0)


def check(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> None:
    """Reject a malformed transaction before it is queued (ValueError naming the field)."""
    for i, c in enumerate(compares):
        if not isinstance(c, Compare):
            raise ValueError(f"compares[{i}]: must be a Compare, got {type(c).__name__}")
        _check_key(f"compares[{i}].key", c.key)
        if c.result not in ("=", "!=", "<", ">"):
            raise ValueError(f"compares[{i}].result: must be one of = != < >, got {c.result!r}")
        if c.target == "value":
            if not isinstance(c.value, bytes):
                raise ValueError(f"compares[{i}].value: target value compares bytes, got {type(c.value).__name__}")
        elif c.target in ("mod_revision", "create_revision", "version"):
            if isinstance(c.value, bool) or not isinstance(c.value, int):
                raise ValueError(f"compares[{i}].value: target {c.target} compares an int, "
                                 f"got {type(c.value).__name__}")
        else:
            raise ValueError(f"compares[{i}].target: must be mod_revision, create_revision, version or value, "
                             f"got {c.target!r}")
    for name, ops in (("success", success), ("failure", failure)):
        written: set[str] = set()
        for i, op in enumerate(ops):
            if not isinstance(op, Put | DeleteKey | Get):
                raise ValueError(f"{name}[{i}]: must be a Put, DeleteKey or Get, got {type(op).__name__}")
            _check_key(f"{name}[{i}].key", op.key)
            if isinstance(op, Put) and not isinstance(op.value, bytes):
                raise ValueError(f"{name}[{i}].value: must be bytes, got {type(op.value).__name__}")
            if isinstance(op, Put | DeleteKey):
                if op.key in written:  # etcd: "duplicate key given in txn request"
                    raise ValueError(f"{name}[{i}].key: {op.key!r} is written twice in one transaction")
                written.add(op.key)
        if len(written) >= MAX_WRITES:
            raise ValueError(f"{name}: at most {MAX_WRITES - 1} writes in one transaction")


def _check_key(field: str, key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{field}: must be a non-empty string, got {key!r}")


def compare(c: Compare, kv: KeyValue | None) -> bool:
    """etcd's comparison. A missing key has revisions and version 0; a value compare against a
    missing key is false whatever the operator (etcd: a missing value cannot be represented)."""
    if c.target == "value":
        if kv is None:
            return False
        return _ordered(kv.value, c.value, c.result)
    actual = 0 if kv is None else getattr(kv, c.target)
    return _ordered(actual, c.value, c.result)


def _ordered(a: int | bytes, b: int | bytes, result: str) -> bool:
    if result == "=":
        return a == b
    if result == "!=":
        return a != b
    if result == "<":
        return a < b  # type: ignore[operator]  # check() made both sides the same type
    return a > b  # type: ignore[operator]


def evaluate(lookup: Lookup, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op],
             revision: int) -> Outcome:
    """Run the transaction against `lookup` as if it got `revision` (used only if it writes).
    Ops see the earlier ops of the same branch (a Get after a Put returns the new value)."""
    ok = all(compare(c, lookup(c.key)) for c in compares)
    ops = success if ok else failure
    local: dict[str, KeyValue | None] = {}
    responses: list[KeyValue | None] = []
    events: list[Event] = []
    for op in ops:
        current = local[op.key] if op.key in local else lookup(op.key)
        if isinstance(op, Get):
            responses.append(current)
        elif isinstance(op, Put):
            if current is None:
                kv = KeyValue(op.key, op.value, revision, revision, 1)
            else:
                kv = KeyValue(op.key, op.value, current.create_revision, revision, current.version + 1)
            local[op.key] = kv
            events.append(Event("PUT", kv, current))
            responses.append(current)
        else:
            if current is not None:
                local[op.key] = None
                events.append(Event("DELETE", tombstone(op.key, revision), current))
            responses.append(current)
    return Outcome(ok, tuple(responses), tuple(events))
