"""Encryption at rest as a Store wrapper: values of the configured resources (the auth room's
EncryptionConfiguration, kube-apiserver's format) are encrypted on every write and decrypted on
every read and watch event, with the storage key as additional data. Above it everything sees
plain JSON (lists, watches, the raw list path); below it the log holds only ciphertext.

A compare on the value of an encrypted key cannot work (every encryption uses a fresh nonce);
the registry compares revisions only, so such a compare is refused as a StoreError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from nodeagent.cluster.auth.encryption import DecryptError, EncryptionConfig
from nodeagent.cluster.storage.interface import (
    Compare,
    Event,
    KeyValue,
    Op,
    Put,
    RangeResult,
    Store,
    StoreError,
    TxnResult,
)


class EncryptedStore:
    def __init__(self, store: Store, config: EncryptionConfig) -> None:
        self.inner, self.config = store, config

    @property
    def revision(self) -> int:
        return self.inner.revision

    @property
    def compacted_revision(self) -> int:
        return self.inner.compacted_revision

    def _open(self, kv: KeyValue | None) -> KeyValue | None:
        if kv is None or not kv.value:
            return kv
        try:
            value, _stale = self.config.decrypt(kv.key, kv.value)
        except DecryptError as e:
            raise StoreError(str(e)) from None
        return KeyValue(kv.key, value, kv.create_revision, kv.mod_revision, kv.version)

    async def get(self, key: str, *, revision: int = 0) -> tuple[KeyValue | None, int]:
        kv, rev = await self.inner.get(key, revision=revision)
        return self._open(kv), rev

    async def range(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> RangeResult:
        res = await self.inner.range(prefix, revision=revision, limit=limit, start_key=start_key)
        kvs = tuple(kv for kv in (self._open(kv) for kv in res.kvs) if kv is not None)
        return RangeResult(kvs, res.revision, res.more, res.count)

    def _seal(self, op: Op) -> Op:
        if isinstance(op, Put):
            return Put(op.key, self.config.encrypt(op.key, op.value))
        return op

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        for c in compares:
            if c.target == "value" and self.config.for_key(c.key) is not None:
                raise StoreError(f"a compare on the value of {c.key} cannot work: the resource is encrypted at rest")
        res = await self.inner.txn(compares, [self._seal(o) for o in success], [self._seal(o) for o in failure])
        return TxnResult(res.succeeded, res.revision, tuple(self._open(kv) for kv in res.responses))

    async def _watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        inner = self.inner.watch(prefix, start_revision)
        try:
            async for ev in inner:
                kv = self._open(ev.kv) if ev.type == "PUT" else ev.kv
                assert kv is not None
                yield Event(ev.type, kv, self._open(ev.prev_kv))
        finally:
            await inner.aclose()  # type: ignore[attr-defined]

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        return self._watch(prefix, start_revision)

    async def compact(self, revision: int) -> None:
        await self.inner.compact(revision)

    async def close(self) -> None:
        await self.inner.close()

