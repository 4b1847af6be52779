"""The control plane's Store: an etcd-shaped key-value store with a revision log.

Shaped on etcd's v3 API (KV Range/Txn, Watch, Compact) so an etcd backend can implement it later
for HA, the way k3s's kine puts SQL behind the same API. Everything the API server keeps is a
key here ("/registry/<resource>/<namespace>/<name>", the object's JSON as the value).

Semantics every backend keeps (the conformance tests in tests/test_storage_*.py check them):
- The store has one revision counter. Every transaction that writes gets the next revision; all
  its writes share it (etcd: one revision per txn). A read-only transaction gets none.
- A KeyValue carries create_revision (the revision that created the key), mod_revision (the last
  write) and version (writes since creation: 1 after the create). The API server's
  `resourceVersion` is the object's mod_revision; a list's is the store revision it was read at.
- `txn` evaluates every Compare against the state every transaction submitted before it left
  (committed, or waiting in the same group commit), so transactions are serializable in
  submission order; then it runs `success` or `failure`. It returns only once its writes are
  durable: a returned TxnResult survives SIGKILL of the process at any later instant. Concurrent
  transactions share one commit (group commit: one fsync for the batch); if a commit fails,
  every transaction of it, and every later one evaluated on top of it, fails with StoreError.
- Readers (get, range, watch) never see a write that is not yet durable.
- `watch(prefix, start_revision)` yields every event with revision >= start_revision whose key
  starts with prefix, in revision order, each exactly once, then follows new commits. A
  start_revision at or below the compacted revision raises Compacted (the API's 410 Gone).
- `range(..., revision=R)` reads the state as of revision R (R > compacted revision); 0 means now.
- `compact(R)` forgets the history up to R: superseded and deleted versions with revision <= R.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int


@dataclass(frozen=True, slots=True)
class Event:
    """One change. For DELETE, kv.mod_revision is the deletion's revision and kv.value is empty;
    prev_kv is the value before the change (None for a create)."""

    type: Literal["PUT", "DELETE"]
    kv: KeyValue
    prev_kv: KeyValue | None


@dataclass(frozen=True, slots=True)
class Compare:
    """etcd's Compare: `target` of `key` compared with `value`. A missing key has
    mod_revision = create_revision = version = 0 and no value."""

    key: str
    target: Literal["mod_revision", "create_revision", "version", "value"]
    result: Literal["=", "!=", "<", ">"]
    value: int | bytes


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class DeleteKey:
    key: str


@dataclass(frozen=True, slots=True)
class Get:
    key: str


Op = Put | DeleteKey | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    """`responses[i]` answers op i of the branch that ran: for Put and DeleteKey the previous
    KeyValue (None if the key did not exist), for Get the current one (None if absent)."""

    succeeded: bool
    revision: int  # the store revision after the txn (its own revision if it wrote)
    responses: tuple[KeyValue | None, ...]


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: tuple[KeyValue, ...]  # sorted by key
    revision: int  # the revision the range was read at
    more: bool  # limit cut the result short
    count: int  # keys in the whole range at that revision (not only those returned)


class StoreError(Exception):
    """The store cannot serve the request (disk full, I/O error, closed); the API answers 5xx."""


class Compacted(StoreError):
    """The requested revision was compacted away (the API answers 410 Gone, reason Expired)."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"required revision {requested} has been compacted (compacted revision {compacted})")
        self.requested = requested
        self.compacted = compacted


class FutureRevision(StoreError):
    """The requested revision is newer than the store's (the API answers 504 Timeout)."""

    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"Too large resource version: {requested}, current: {current}")
        self.requested = requested
        self.current = current


class Store(Protocol):
    @property
    def revision(self) -> int:
        """The latest committed revision."""
        ...

    @property
    def compacted_revision(self) -> int: ...

    async def get(self, key: str, *, revision: int = 0) -> tuple[KeyValue | None, int]:
        """The key at `revision` (0: now) and the revision read at."""
        ...

    async def range(self, prefix: str, *, revision: int = 0, limit: int = 0,
                    start_key: str = "") -> RangeResult:
        """Keys starting with `prefix` (and >= start_key when given), sorted; at most `limit` (0: all)."""
        ...

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult: ...

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        """Events from start_revision on (see the module docstring); Compacted if too old.
        Closing the iterator (aclose) stops the watch."""
        ...

    async def compact(self, revision: int) -> None: ...

    async def close(self) -> None: ...
