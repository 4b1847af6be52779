"""The generic registry store: every verb of every kind over the Store protocol (registry/generic).

Keys are `/registry/<group|core>/<resource>/[<namespace>/]<name>`; values are the object's JSON
(codec.py). Writes are compare-and-swap transactions on the key's mod_revision, so two writers
can never both win: a stale resourceVersion is a 409 Conflict, an update without one is retried
on a fresh read. Reads come from the store's memory (the backends keep the latest state there).

What the store does for every kind: uid, creationTimestamp, generation (1, then +1 on spec
changes), generateName's 5-character suffix, the namespace must exist and not be terminating,
spec and status updates reset each other's fields, finalizers and deletionTimestamp hold deleted
objects, propagationPolicy is recorded as the `foregroundDeletion` / `orphan` finalizers for the
garbage collector, graceful deletion where the strategy asks for it (pods), dryRun=All.
"""

from __future__ import annotations

import builtins
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import structlog

from nodeagent.cluster.controllers.common.hashing import NAME_ALPHABET
from nodeagent.cluster.controllers.garbagecollector.graph import FOREGROUND, ORPHAN
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.codec import (
    decode,
    decode_continue,
    decode_kv,
    encode,
    encode_continue,
    with_resource_version,
)
from nodeagent.cluster.registry.options import (
    Context,
    DeleteOptions,
    ListOptions,
    parse_resource_version,
    validate_list_options,
)
from nodeagent.cluster.registry.plugins import (
    Admitter,
    ApplyConflict,
    FieldManager,
    FieldValidator,
    Patcher,
    PatchError,
    PatchType,
)
from nodeagent.cluster.registry.strategy import SERVER_METADATA, Obj, Strategy
from nodeagent.cluster.registry.watch import Subscription, WatchFilter, WatchHub, WatchItem
from nodeagent.cluster.schema.decode import Decoded
from nodeagent.cluster.storage.interface import (
    Compacted,
    Compare,
    DeleteKey,
    FutureRevision,
    KeyValue,
    Put,
    Store,
    StoreClosed,
    StoreError,
)
from nodeagent.core.clock import Clock
from nodeagent.core.errors import FieldError
from nodeagent.core.jsoncopy import json_copy
from nodeagent.core.timefmt import rfc3339

log = structlog.get_logger(__name__)

GENERATE_SUFFIX = 5
MAX_NAME_LENGTH = 253
UPDATE_RETRIES = 16
LIST_CHUNK = 500

OMIT_EMPTY_METADATA = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields", "generateName")
NamespaceCheck = Callable[[str, Context], Awaitable[None]]
T = TypeVar("T")


def _same(obj: Obj) -> Obj:
    return obj


@dataclass(frozen=True)
class ListResult:
    items: list[Obj]
    revision: int
    continue_token: str = ""
    remaining: int | None = None


@dataclass(frozen=True)
class WatchStart:
    """What a watch sends first (initial ADDED events, then maybe the initial-events-end bookmark)."""

    initial: list[WatchItem]
    subscription: Subscription
    initial_end: int | None  # the revision of the `k8s.io/initial-events-end` bookmark to send, if any


@dataclass
class Plugins:
    """The pieces from the rooms beside the registry; None where a piece is not wired (yet)."""

    patcher: Patcher | None = None
    field_manager: FieldManager | None = None
    validator: FieldValidator | None = None
    admitter: Admitter | None = None


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _without_rv(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return obj


def store_error(e: StoreError) -> errors.StatusError:
    """The Status a storage failure answers with (410, 504, 503 while shutting down, else 500 and a log line)."""
    if isinstance(e, Compacted):
        return errors.too_old(e.requested, e.compacted)
    if isinstance(e, FutureRevision):
        return errors.too_large(e.requested, e.current)
    if isinstance(e, StoreClosed):  # a request that came in while the server shuts down
        return errors.unavailable("the server is shutting down")
    log.error("store_failed", error=str(e))
    return errors.internal(f"storage error: {e}")


class GenericStore:
    def __init__(self, store: Store, strategy: Strategy, clock: Clock, *, plugins: Plugins | None = None,
                 namespace_check: NamespaceCheck | None = None, rng: random.Random | None = None) -> None:
        self.store, self.strategy, self.clock = store, strategy, clock
        self.info: ResourceInfo = strategy.info
        self.plugins = plugins or Plugins()
        self.namespace_check = namespace_check
        self.rng = rng or random.Random()
        self.hub = WatchHub(store, self.info.key_prefix, self.decode_value)

    # ---- helpers ---------------------------------------------------------------------------------
    def _not_found(self, name: str) -> errors.StatusError:
        return errors.not_found(self.info.plural, self.info.group, name)

    def _invalid(self, name: str, errs: list[FieldError]) -> errors.StatusError:
        return errors.invalid(self.info.kind, self.info.group, name, errs)

    def prefix(self, namespace: str | None) -> str:
        if self.info.namespaced and namespace:
            return f"{self.info.key_prefix}{namespace}/"
        return self.info.key_prefix

    def key(self, namespace: str | None, name: str) -> str:
        return self.info.key(namespace, name)

    def served(self, obj: Obj) -> Obj:
        """A stored object in the served version (events.k8s.io and core/v1 share storage)."""
        out = self.strategy.from_storage(obj)
        out.pop("kind", None)
        out.pop("apiVersion", None)
        return {"kind": self.info.kind, "apiVersion": self.info.api_version, **out}

    def _decode(self, kv: KeyValue) -> Obj:
        return self.served(decode_kv(kv))

    def _check_body(self, obj: Any, namespace: str | None, name: str | None) -> Obj:
        """The decoded body as a fresh object of this kind, its metadata a mapping."""
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of the request must be a {self.info.kind} object")
        self._check_kind(obj)
        body: Obj = {str(k): json_copy(v) for k, v in obj.items()}
        obj = body
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        for k in ("name", "generateName", "namespace", "resourceVersion", "uid"):
            if k in meta and meta[k] is not None and not isinstance(meta[k], str):
                raise errors.bad_request(f"metadata.{k} must be a string")
        for k in OMIT_EMPTY_METADATA:  # Go's typed objects leave empty maps and lists out (omitempty)
            if k in meta and meta[k] in ({}, [], None):
                del meta[k]
        if self.info.namespaced:
            given = meta.get("namespace")
            if given and namespace and given != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            if namespace:
                meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None:
            if meta.get("name") and meta["name"] != name:
                raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on "
                                         f"the URL ({name})")
            meta["name"] = name
        body["apiVersion"], body["kind"] = self.info.api_version, self.info.kind
        return body

    def _validated(self, body: Any, ctx: Context, name: str = "") -> Any:
        """The body after field validation: unknown fields an error (Strict), a warning (Warn) or
        ignored, and dropped either way; values of the wrong type are 422 Invalid."""
        raw = body.value if isinstance(body, Decoded) else body  # a decoded request body, or a plain value
        if not isinstance(raw, dict):
            raise errors.bad_request(f"couldn't get version/kind; json parse error: cannot unmarshal "
                                     f"{type(raw).__name__} into an object of kind {self.info.kind}")
        self._check_kind(raw)
        validator = self.plugins.validator
        if validator is None or ctx.internal:
            return raw
        check = validator.check(body, self.info, ctx.field_validation)
        if check.strict_error:
            kind, version = self.info.kind, self.info.version
            raise errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: '
                                     f"{check.strict_error}")
        if check.errors:
            meta = raw.get("metadata") if isinstance(raw, dict) else None
            shown = name or (str(meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else "")
            raise self._invalid(shown, list(check.errors))
        ctx.warnings.extend(check.warnings)
        return check.value

    def _check_kind(self, obj: dict[str, Any]) -> None:
        version, kind = obj.get("apiVersion"), obj.get("kind")
        if version not in (None, "") and version != self.info.api_version:
            raise errors.bad_request(f"the API version in the data ({version}) does not match the expected "
                                     f"API version ({self.info.api_version})")
        if kind not in (None, "") and kind != self.info.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind "
                                     f"({self.info.kind})")

    def _managed(self, old: Obj | None, new: Obj, ctx: Context, subresource: str = "") -> Obj:
        fm = self.plugins.field_manager
        if fm is None or ctx.applying:  # server-side apply records its own managedFields
            return new
        if subresource and subresource in self.strategy.unmanaged_subresources:
            return new  # written as upstream's storage-level update: managedFields stay the stored ones
        return fm.update(old, new, self.info, manager=ctx.field_manager or "unknown", subresource=subresource)

    async def _admit(self, op: Any, obj: Obj, old: Obj | None, ctx: Context, subresource: str = "") -> None:
        if self.plugins.admitter is not None:
            await self.plugins.admitter.admit(op, self.info, obj, old, subresource=subresource, ctx=ctx)

    def _generated_name(self, prefix: str) -> str:
        prefix = prefix[: MAX_NAME_LENGTH - GENERATE_SUFFIX]
        return prefix + "".join(self.rng.choice(NAME_ALPHABET) for _ in range(GENERATE_SUFFIX))

    async def _txn_put(self, key: str, value: bytes, mod_revision: int) -> int | None:
        """Put if the key's mod_revision is still `mod_revision` (0: absent); the new revision or None."""
        try:
            res = await self.store.txn([Compare(key, "mod_revision", "=", mod_revision)], [Put(key, value)])
        except StoreError as e:
            raise store_error(e) from None
        return res.revision if res.succeeded else None

    async def _txn_delete(self, key: str, mod_revision: int) -> int | None:
        try:
            res = await self.store.txn([Compare(key, "mod_revision", "=", mod_revision)], [DeleteKey(key)])
        except StoreError as e:
            raise store_error(e) from None
        return res.revision if res.succeeded else None

    async def _get_kv(self, key: str, revision: int = 0) -> KeyValue | None:
        try:
            kv, _ = await self.store.get(key, revision=revision)
        except StoreError as e:
            raise store_error(e) from None
        return kv

    # ---- create ----------------------------------------------------------------------------------
    async def create(self, namespace: str | None, body: Any, ctx: Context) -> Obj:
        return await self._create_checked(self._check_body(self._validated(body, ctx), namespace, None), ctx)

    async def _create_checked(self, obj: Obj, ctx: Context) -> Obj:
        """create() of a body already through field validation and _check_body (its own copy)."""
        meta = obj["metadata"]
        generate = meta.get("generateName")
        generated = bool(not meta.get("name") and generate)
        if generated:
            meta["name"] = self._generated_name(generate)
        for k in SERVER_METADATA:
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock.wall())
        if self.strategy.generation:
            meta["generation"] = 1
        self.strategy.prepare_for_create(obj)
        self.strategy.default(obj)
        errs = self.strategy.validate_meta(obj, generate_name=generated)
        errs += self.strategy.validate(obj)
        if errs:
            raise self._invalid(str(meta.get("name") or generate or ""), errs)
        if self.info.namespaced and self.namespace_check is not None:
            await self.namespace_check(meta["namespace"], ctx)
        await self._admit("CREATE", obj, None, ctx)
        obj = self._managed(None, obj, ctx)
        meta = obj["metadata"]
        key = self.key(meta.get("namespace"), meta["name"])
        if ctx.dry_run:
            if await self._get_kv(key) is not None:
                raise errors.already_exists(self.info.plural, self.info.group, meta["name"])
            return obj
        for _ in range(8 if generated else 1):
            rev = await self._txn_put(key, encode(self.strategy.to_storage(obj)), 0)
            if rev is not None:
                meta["resourceVersion"] = str(rev)
                return obj
            if not generated:
                break
            meta["name"] = self._generated_name(generate)  # a generated name taken: kube retries too
            key = self.key(meta.get("namespace"), meta["name"])
        raise errors.already_exists(self.info.plural, self.info.group, meta["name"])

    # ---- get / list ------------------------------------------------------------------------------
    async def get(self, namespace: str | None, name: str, resource_version: str = "") -> Obj:
        if resource_version not in ("", "0"):
            want = parse_resource_version(resource_version)
            if want > self.store.revision:
                raise errors.too_large(want, self.store.revision)
        kv = await self._get_kv(self.key(namespace, name))
        if kv is None:
            raise self._not_found(name)
        return self._decode(kv)

    async def versions(self, namespace: str | None) -> tuple[tuple[str, int], ...]:
        """(key, mod_revision) of every object now stored under the namespace (all, for None),
        nothing decoded: the stamp of a cache built from a list (admission's PriorityClasses)."""
        try:
            res = await self.store.range(self.prefix(namespace))
        except StoreError as e:
            raise store_error(e) from None
        return tuple((kv.key, kv.mod_revision) for kv in res.kvs)

    def check_fields(self, opts: ListOptions) -> None:
        if opts.field.empty:  # most lists (admission reads four kinds on every pod create)
            return
        supported = {"metadata.name", "metadata.namespace"} | self.strategy.field_labels
        for f in opts.field.fields():
            if f not in supported:
                raise errors.bad_request(f'field label not supported: {f}')

    def matches(self, obj: Obj, opts: ListOptions) -> bool:
        if not opts.label.empty and not opts.label.matches((obj.get("metadata") or {}).get("labels")):
            return False
        return opts.field.empty or opts.field.matches(self.strategy.fields(obj))

    def _list_revision(self, opts: ListOptions) -> int:
        """The revision to read a list at: 0 (now) unless the options ask for an exact one."""
        rv, match = opts.resource_version, opts.resource_version_match
        if rv in ("", "0"):
            return 0
        want = parse_resource_version(rv)
        current = self.store.revision
        if want > current:
            raise errors.too_large(want, current)
        exact = match == "Exact" or (not match and opts.limit > 0)
        if exact:
            if want <= self.store.compacted_revision:
                raise errors.too_old(want, self.store.compacted_revision)
            return want
        return 0

    async def list(self, namespace: str | None, opts: ListOptions) -> ListResult:
        items, result = await self.list_as(namespace, opts, _same)
        return ListResult(items, result.revision, result.continue_token, result.remaining)

    async def list_as(self, namespace: str | None, opts: ListOptions, convert: Callable[[Obj], T]
                      ) -> tuple[builtins.list[T], ListResult]:
        """list() with each item converted as soon as it is decoded (a Table row's bytes): the
        decoded objects of a big list never pile up. The ListResult carries no items."""
        validate_list_options(opts)
        self.check_fields(opts)
        prefix = self.prefix(namespace)
        start = ""
        if opts.continue_token:
            revision, start_rel = decode_continue(opts.continue_token)
            start = prefix + start_rel
            if revision <= self.store.compacted_revision:
                raise errors.gone(errors.CONTINUE_EXPIRED)
        else:
            revision = self._list_revision(opts)
        name = opts.field.value_of("metadata.name")
        if name is not None and not start and (namespace or not self.info.namespaced):
            one = await self._list_one(namespace, name, opts, revision)
            return [convert(o) for o in one.items], ListResult([], one.revision)
        items: builtins.list[T] = []
        limit = opts.limit if opts.limit > 0 else 0
        while True:
            chunk = 0 if not limit else (LIST_CHUNK if opts.filtered else limit - len(items))
            try:
                res = await self.store.range(prefix, revision=revision, limit=chunk, start_key=start)
            except StoreError as e:
                if opts.continue_token and isinstance(e, Compacted):
                    raise errors.gone(errors.CONTINUE_EXPIRED) from None
                raise store_error(e) from None
            revision = res.revision
            for i, kv in enumerate(res.kvs):
                obj = self._decode(kv)
                if not self.matches(obj, opts):
                    continue
                items.append(convert(obj))
                if limit and len(items) >= limit:
                    if i == len(res.kvs) - 1 and not res.more:
                        return items, ListResult([], revision)
                    # count is every key of the range read (from start_key on): what this page left
                    remaining = None if opts.filtered else res.count - (i + 1)
                    token = encode_continue(revision, kv.key[len(prefix):] + "\x00")
                    return items, ListResult([], revision, token, remaining)
            if not limit or not res.more or not res.kvs:
                return items, ListResult([], revision)
            start = res.kvs[-1].key + "\x00"

    @property
    def raw_lists(self) -> bool:
        """Whether unfiltered lists may be served from the stored bytes (no conversion on read)."""
        return type(self.strategy).from_storage is Strategy.from_storage

    async def list_raw(self, namespace: str | None, opts: ListOptions) -> tuple[Sequence[bytes], ListResult]:
        """An unfiltered list as the items' JSON bytes, for the HTTP layer's JSON output: the stored
        values with their resourceVersion spliced in, never decoded (lists of 10,000 pods stay cheap).
        Same options and errors as list(); the ListResult carries no items."""
        if opts.filtered or not self.raw_lists:
            raise ValueError("list_raw serves unfiltered lists of kinds without conversion")
        validate_list_options(opts)
        prefix = self.prefix(namespace)
        start = ""
        if opts.continue_token:
            revision, start_rel = decode_continue(opts.continue_token)
            start = prefix + start_rel
            if revision <= self.store.compacted_revision:
                raise errors.gone(errors.CONTINUE_EXPIRED)
        else:
            revision = self._list_revision(opts)
        limit = opts.limit if opts.limit > 0 else 0
        try:
            res = await self.store.range(prefix, revision=revision, limit=limit, start_key=start)
        except StoreError as e:
            if opts.continue_token and isinstance(e, Compacted):
                raise errors.gone(errors.CONTINUE_EXPIRED) from None
            raise store_error(e) from None
        items: builtins.list[bytes] = []
        for kv in res.kvs:
            raw = with_resource_version(kv.value, kv.mod_revision)
            items.append(raw if raw is not None else orjson.dumps(self._decode(kv)))
        if limit and res.more and res.kvs:
            token = encode_continue(res.revision, res.kvs[-1].key[len(prefix):] + "\x00")
            return items, ListResult([], res.revision, token, res.count - len(res.kvs))
        return items, ListResult([], res.revision)

    async def _list_one(self, namespace: str | None, name: str, opts: ListOptions, revision: int) -> ListResult:
        """A list narrowed by metadata.name= to one key (kubectl wait, delete --wait)."""
        try:
            kv, rev = await self.store.get(self.key(namespace, name), revision=revision)
        except StoreError as e:
            raise store_error(e) from None
        items = []
        if kv is not None and (obj := self._decode(kv)) and self.matches(obj, opts):
            items.append(obj)
        return ListResult(items, rev)

    # ---- update ----------------------------------------------------------------------------------
    async def update(self, namespace: str | None, name: str, body: Any, ctx: Context, *,
                     subresource: str = "") -> tuple[Obj, bool]:
        """PUT: (the object, whether it was created)."""
        new = self._check_body(self._validated(body, ctx, name), namespace, name)
        precondition = new["metadata"].get("resourceVersion") or ""
        if precondition:
            parse_resource_version(precondition)
        return await self._update(namespace, name, lambda old: json_copy(new), ctx, precondition=precondition,
                                  subresource=subresource)

    async def guaranteed_update(self, namespace: str | None, name: str, mutate: Callable[[Obj], Obj], ctx: Context,
                                *, subresource: str = "") -> Obj:
        """Read, mutate, compare-and-swap; retried on a fresh read when the object moved meanwhile
        (kube's GuaranteedUpdate). `mutate` may raise a StatusError to refuse."""

        def call(old: Obj | None) -> Obj:
            assert old is not None  # never creates
            return mutate(old)

        obj, _ = await self._update(namespace, name, call, ctx, subresource=subresource, create_allowed=False)
        return obj

    async def _update(self, namespace: str | None, name: str, mutate: Callable[[Obj | None], Obj], ctx: Context, *,
                      precondition: str = "", subresource: str = "", create_allowed: bool | None = None
                      ) -> tuple[Obj, bool]:
        key = self.key(namespace, name)
        can_create = self.strategy.allow_create_on_update if create_allowed is None else create_allowed
        for _ in range(UPDATE_RETRIES):
            kv = await self._get_kv(key)
            if kv is None:
                if not can_create or subresource:
                    raise self._not_found(name)
                body = mutate(None)  # validated and checked already, and a copy of its own (update, patch)
                body["metadata"].pop("resourceVersion", None)
                return await self._create_checked(body, ctx), True
            old = self._decode(kv)
            if precondition and precondition != old["metadata"].get("resourceVersion"):
                raise errors.stale(self.info.plural, self.info.group, name)
            if not precondition and not self.strategy.allow_unconditional_update:
                raise self._invalid(name, [FieldError("metadata.resourceVersion",
                                                      "Invalid value: 0x0: must be specified for an update")])
            new = mutate(old)
            result = await self._write_update(key, kv, old, new, ctx, subresource)
            if result is not None:
                return result, False
            if precondition:
                raise errors.stale(self.info.plural, self.info.group, name)
        raise errors.conflict(self.info.plural, self.info.group, name, "too many concurrent updates; try again")

    def _merge_server_fields(self, new: Obj, old: Obj) -> None:
        meta, old_meta = _meta(new), old["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("selfLink", None)
        meta["name"] = old_meta["name"]
        if self.info.namespaced:
            meta["namespace"] = old_meta["namespace"]
        if self.info.namespaced is False:
            meta.pop("namespace", None)
        if "generateName" in old_meta and "generateName" not in meta:
            meta["generateName"] = old_meta["generateName"]

    async def _write_update(self, key: str, kv: KeyValue, old: Obj, new: Obj, ctx: Context,
                            subresource: str) -> Obj | None:
        """Prepare, validate, admit and write one update; None when the key moved meanwhile."""
        name = old["metadata"]["name"]
        sent_uid = _meta(new).get("uid")  # kept as the old one when unset; a different one is refused below
        if subresource:
            if subresource == "status":
                new = self.strategy.prepare_for_status_update(new, old)
            else:
                new = self.strategy.prepare_for_subresource_update(subresource, new, old)
            self._merge_server_fields(new, old)
            strategy = self.strategy
            if subresource in strategy.spec_subresources and strategy.spec_of(new) != strategy.spec_of(old):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
            errs = self.strategy.validate_meta(new) + self.strategy.validate_status_update(new, old)
        else:
            self._merge_server_fields(new, old)
            self.strategy.prepare_for_update(new, old)
            self.strategy.default(new)
            if self.strategy.generation and self.strategy.spec_of(new) != self.strategy.spec_of(old):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
            errs = self.strategy.validate_meta(new) + self.strategy.validate_update(new, old)
        if sent_uid and sent_uid != old["metadata"].get("uid"):  # kube-apiserver's ValidateObjectMetaUpdate
            errs.append(FieldError("metadata.uid", f'Invalid value: "{sent_uid}": field is immutable'))
        if old["metadata"].get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or ()) - set(old["metadata"].get("finalizers") or ())
            if added:
                errs.append(FieldError("metadata.finalizers", "Forbidden: no new finalizers can be added if the "
                                                              "object is being deleted, found new finalizers "
                                       + str(sorted(added))))
        if errs:
            raise self._invalid(name, errs)
        await self._admit("UPDATE", new, old, ctx, subresource)
        new = self._managed(old, new, ctx, subresource)
        stored_new = self.strategy.to_storage(new)
        if _without_rv(stored_new) == _without_rv(self.strategy.to_storage(old)):
            return old  # nothing changed: no write, the resourceVersion stays (as kube-apiserver)
        value = encode(stored_new)
        if ctx.dry_run:
            return new
        if self._finished(new) and not self.strategy.held(new):
            rev = await self._txn_delete(key, kv.mod_revision)
            if rev is None:
                return None
            new["metadata"]["resourceVersion"] = str(rev)
            return new
        rev = await self._txn_put(key, value, kv.mod_revision)
        if rev is None:
            return None
        new["metadata"]["resourceVersion"] = str(rev)
        return new

    @staticmethod
    def _finished(obj: Obj) -> bool:
        """Deleted, no finalizer left and no grace period running: the object goes (ShouldDeleteDuringUpdate)."""
        meta = obj["metadata"]
        return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers") \
            and meta.get("deletionGracePeriodSeconds") == 0

    # ---- patch -----------------------------------------------------------------------------------
    async def patch(self, namespace: str | None, name: str, patch_type: PatchType, patch: Any, ctx: Context, *,
                    subresource: str = "") -> tuple[Obj, bool]:
        patcher = self.plugins.patcher
        if patcher is None:
            raise errors.unsupported_media_type(patch_type, [])
        if patch_type == "apply" and not ctx.field_manager:
            raise errors.bad_request("PATCH with the apply content type requires a fieldManager")
        ctx.applying = patch_type == "apply"

        def mutate(old: Obj | None) -> Obj:
            try:
                out = patcher.patch(patch_type, old, patch, self.info, field_manager=ctx.field_manager,
                                    force=ctx.force, subresource=subresource)
            except ApplyConflict as e:
                details = {"name": name, "group": self.info.group, "kind": self.info.plural, "causes": e.causes}
                raise errors.StatusError(409, "Conflict", str(e), details) from None
            except PatchError as e:
                if e.malformed:
                    raise errors.bad_request(str(e)) from None
                raise self._invalid(name, [FieldError("", str(e))]) from None
            if not isinstance(out, dict):
                raise self._invalid(name, [FieldError("", "the patched object is not an object")])
            out = self._check_body(self._validated(out, ctx, name), namespace, name)
            rv = out["metadata"].get("resourceVersion")
            if old is not None and rv and rv != old["metadata"].get("resourceVersion"):
                raise errors.stale(self.info.plural, self.info.group, name)
            return out

        return await self._update(namespace, name, mutate, ctx, subresource=subresource,
                                  create_allowed=patch_type == "apply" and not subresource)

    # ---- delete ----------------------------------------------------------------------------------
    async def delete(self, namespace: str | None, name: str, opts: DeleteOptions, ctx: Context) -> tuple[Obj, bool]:
        """(the object, whether it is gone now); an object held by finalizers or a grace period stays."""
        if (why := self.strategy.delete_refused(name)) is not None:
            raise errors.forbidden(self.info.plural, self.info.group, name, why)
        key = self.key(namespace, name)
        for _ in range(UPDATE_RETRIES):
            kv = await self._get_kv(key)
            if kv is None:
                raise self._not_found(name)
            obj = self._decode(kv)
            meta = obj["metadata"]
            if opts.uid is not None and opts.uid != meta.get("uid"):
                raise errors.conflict(self.info.plural, self.info.group, name,
                                      f"Precondition failed: UID in precondition: {opts.uid}, UID in object meta: "
                                      f"{meta.get('uid')}")
            if opts.resource_version is not None and opts.resource_version != meta.get("resourceVersion"):
                raise errors.conflict(self.info.plural, self.info.group, name,
                                      f"Precondition failed: ResourceVersion in precondition: "
                                      f"{opts.resource_version}, ResourceVersion in object meta: "
                                      f"{meta.get('resourceVersion')}")
            await self._admit("DELETE", obj, obj, ctx)
            new = json_copy(obj)
            nmeta = new["metadata"]
            finalizers = list(nmeta.get("finalizers") or [])
            policy = opts.propagation_policy or ("Orphan" if opts.orphan_dependents else None)
            if policy == "Foreground" and FOREGROUND not in finalizers:
                finalizers = [f for f in finalizers if f != ORPHAN] + [FOREGROUND]
            elif policy == "Orphan" and ORPHAN not in finalizers:
                finalizers = [f for f in finalizers if f != FOREGROUND] + [ORPHAN]
            elif policy == "Background":
                finalizers = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
            if opts.orphan_dependents is False:
                finalizers = [f for f in finalizers if f != ORPHAN]
            grace = self.strategy.delete_grace(obj, opts.grace_period_seconds)
            pending = meta.get("deletionGracePeriodSeconds")
            if isinstance(pending, int) and pending < grace and meta.get("deletionTimestamp"):
                grace = pending  # a second delete may shorten a grace period, never lengthen it
            if not finalizers and grace == 0 and not self.strategy.held(obj):
                if ctx.dry_run:
                    return obj, True
                rev = await self._txn_delete(key, kv.mod_revision)
                if rev is None:
                    continue
                obj["metadata"]["resourceVersion"] = str(rev)
                return obj, True
            now = self.clock.wall()
            if finalizers:
                nmeta["finalizers"] = finalizers
            if not meta.get("deletionTimestamp") or grace < (pending if isinstance(pending, int) else 1 << 62):
                nmeta["deletionTimestamp"] = rfc3339(now + grace)
                nmeta["deletionGracePeriodSeconds"] = grace
            self.strategy.on_deleting(new)
            if ctx.dry_run:
                return new, False
            stored = encode(self.strategy.to_storage(new))
            if stored == kv.value:
                return obj, False
            rev = await self._txn_put(key, stored, kv.mod_revision)
            if rev is None:
                continue
            nmeta["resourceVersion"] = str(rev)
            return new, False
        raise errors.conflict(self.info.plural, self.info.group, name, "too many concurrent updates; try again")

    async def delete_collection(self, namespace: str | None, list_opts: ListOptions, opts: DeleteOptions,
                                ctx: Context) -> ListResult:
        listed = await self.list(namespace, ListOptions(label=list_opts.label, field=list_opts.field))
        out = []
        for obj in listed.items:
            meta = obj["metadata"]
            try:
                deleted, _ = await self.delete(meta.get("namespace"), meta["name"], opts, ctx)
            except errors.StatusError as e:
                if e.code == 404:
                    continue
                raise
            out.append(deleted)
        return ListResult(out, self.store.revision)

    def decode_value(self, value: bytes, revision: int) -> Obj:
        return self.served(decode(value, revision))

    # ---- watch -----------------------------------------------------------------------------------
    async def watch(self, namespace: str | None, opts: ListOptions) -> WatchStart:
        """A watch per the options: resume after a revision, or the current state first (RV unset or
        "0", or WatchList's sendInitialEvents=true, which ends the initial state with a bookmark)."""
        validate_list_options(opts)
        self.check_fields(opts)
        name = opts.field.value_of("metadata.name")
        exact = self.key(namespace, name) if name is not None and (namespace or not self.info.namespaced) else ""
        flt = WatchFilter(self.prefix(namespace), exact, (lambda o: self.matches(o, opts)) if opts.filtered else None)
        rv = opts.resource_version
        initial = opts.send_initial_events if opts.send_initial_events is not None else rv in ("", "0")
        if not initial:
            after = parse_resource_version(rv) if rv not in ("", "0") else self.store.revision
            return WatchStart([], self.hub.subscribe(after, flt), None)
        if rv not in ("", "0"):
            want = parse_resource_version(rv)
            if want > self.store.revision:
                raise errors.too_large(want, self.store.revision)
        self.hub._ensure()  # started before the read, so it covers every change after it
        listed = await self.list(namespace, ListOptions(label=opts.label, field=opts.field))
        items = [WatchItem("ADDED", obj) for obj in listed.items]
        sub = self.hub.subscribe(listed.revision, flt)
        return WatchStart(items, sub, listed.revision if opts.send_initial_events else None)
