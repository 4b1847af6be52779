"""The control plane's Store: an etcd-shaped key-value store with a revision log.

Shaped on etcd's v3 API (KV Range/Txn, Watch, Compact) so an etcd backend can implement it later
for HA, the way k3s's kine puts SQL behind the same API. Everything the API server keeps is a
key here ("/registry/<resource>/<namespace>/<name>", the object's JSON as the value).

Semantics every backend keeps (the conformance tests in tests/test_storage_*.py check them):
- The store has one revision counter. Every transaction that writes gets the next revision; all
  its writes share it (etcd: one revision per txn). A read-only transaction gets none, and neither
  does one whose only writes are DeleteKeys of missing keys (they delete nothing).
- A KeyValue carries create_revision (the revision that created the key), mod_revision (the last
  write) and version (writes since creation: 1 after the create). The API server's
  `resourceVersion` is the object's mod_revision; a list's is the store revision it was read at.
- `txn` evaluates every Compare against the state every transaction submitted before it left
  (committed, or waiting in the same group commit), so transactions are serializable in
  submission order; then it runs `success` or `failure`, op by op (a Get sees the earlier Puts and
  DeleteKeys of its branch). A value Compare on a missing key is false whatever the operator
  (etcd). A branch may write a key once (etcd: "duplicate key"); a malformed txn raises ValueError
  naming the field (`success[1].key: ...`). It returns only once its writes are
  durable: a returned TxnResult survives SIGKILL of the process at any later instant. Concurrent
  transactions share one commit (group commit: one fsync for the batch); if a commit fails,
  every transaction of it, and every later one evaluated on top of it, fails with StoreError.
  A caller cancelled while it waits may still have its transaction committed (as with etcd).
- Readers (get, range, watch) never see a write that is not yet durable; a read-only transaction
  evaluated on top of writes still committing returns once they are durable.
- `watch(prefix, start_revision)` yields every event with revision >= start_revision whose key
  starts with prefix, in revision order, each exactly once, then follows new commits.
  start_revision 0 means "from the next revision"; one beyond it waits for it (etcd). A
  start_revision at or below the compacted revision raises Compacted (the API's 410 Gone), at the
  call; a watcher that a later compaction passes before it has read its events raises Compacted
  from __anext__. A watcher has no buffer of its own (it is a position in the store's history),
  so a slow one blocks no writer and no other watcher; cancelling a pending __anext__ (a timeout)
  keeps its position; aclose() ends it; closing the store ends it with StoreError.
- A DELETE event's kv is etcd's tombstone: the key, mod_revision = the deletion's revision, empty
  value, create_revision = version = 0; its prev_kv is the deleted version.
- `range(..., revision=R)` reads the state as of revision R (R >= compacted revision: the state at
  the compacted revision itself is kept, as in etcd); 0 means now; R beyond the current revision
  raises FutureRevision. `count` counts the keys of the requested range at that revision (prefix,
  and >= start_key when given), not only those returned, so kube-apiserver's remainingItemCount
  is count - len(kvs).
- `compact(R)` forgets the history up to R: superseded and deleted versions with revision <= R.
  R at or below the compacted revision raises Compacted, R beyond the current one FutureRevision.
- After `close()` every call raises StoreError.
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
    """One change. For DELETE, kv.mod_revision is the deletion's revision, kv.value is empty and
    kv.create_revision = kv.version = 0 (etcd's tombstone); prev_kv is the value before the
    change (None for a create)."""

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


class StoreClosed(StoreError):
    """The store was closed: the server is shutting down (the API answers 503, as kube-apiserver
    does while it terminates, and logs nothing: it is not a failure)."""

    def __init__(self) -> None:
        super().__init__("the store is closed")


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
        """Events from start_revision on (0: from the next revision; see the module docstring);
        Compacted if too old. Closing the iterator (aclose) stops the watch."""
        ...

    async def compact(self, revision: int) -> None:
        """Forget revisions <= `revision`: Compacted if already done, FutureRevision if not yet written."""
        ...

    async def close(self) -> None: ...
