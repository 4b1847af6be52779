"""The registry: the catalog and one store per resource, built over one Store.

Also the namespace lifecycle every namespaced create goes through (kube's NamespaceLifecycle
admission): the namespace must exist (404 `namespaces "x" not found`) and not be terminating
(403 `unable to create new content in namespace x because it is being terminated`).
"""

from __future__ import annotations

import random

from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.authorization import AuthorizationOff, Authorizer
from nodeagent.cluster.registry.catalog import Catalog, ResourceInfo
from nodeagent.cluster.registry.codec import decode_kv
from nodeagent.cluster.registry.kinds import BUILTIN, REVIEWS
from nodeagent.cluster.registry.kinds.reviews import ReviewStore
from nodeagent.cluster.registry.options import Context
from nodeagent.cluster.registry.store import GenericStore, Plugins, store_error
from nodeagent.cluster.registry.strategy import Strategy
from nodeagent.cluster.storage.interface import Store, StoreError
from nodeagent.core.clock import Clock

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NAMESPACES_REMEMBERED = 4096  # check_namespace's answers kept (by namespace and its mod_revision)


class Registry:
    def __init__(self, store: Store, clock: Clock, *, plugins: Plugins | None = None,
                 authorizer: Authorizer | None = None, strategies: tuple[type[Strategy], ...] = BUILTIN,
                 rng: random.Random | None = None) -> None:
        self.store, self.clock = store, clock
        self.plugins = plugins or Plugins()
        self.authorizer: Authorizer = authorizer or AuthorizationOff()
        self.catalog = Catalog()
        self.stores: dict[tuple[str, str, str], GenericStore] = {}
        self.reviews: dict[tuple[str, str, str], ReviewStore] = {}
        for cls in strategies:
            self.add(cls())
        for cls in REVIEWS:
            strategy = cls()
            self.catalog.add(strategy.info)
            self.reviews[(strategy.info.group, strategy.info.version, strategy.info.plural)] = \
                ReviewStore(strategy, self.authorizer)
        self._namespaces = self.stores[("", "v1", "namespaces")]
        self._terminating: dict[str, tuple[int, bool]] = {}

    def add(self, strategy: Strategy) -> GenericStore:
        """Serve one more kind (a catalog entry plus its strategy)."""
        info = strategy.info
        self.catalog.add(info)
        gs = GenericStore(self.store, strategy, self.clock, plugins=self.plugins,
                          namespace_check=self.check_namespace if info.namespaced else None)
        self.stores[(info.group, info.version, info.plural)] = gs
        return gs

    def store_for(self, info: ResourceInfo) -> GenericStore | None:
        return self.stores.get((info.group, info.version, info.plural))

    def resource(self, group: str, version: str, plural: str) -> GenericStore:
        gs = self.stores.get((group, version, plural))
        if gs is None:
            raise errors.path_not_found()
        return gs

    async def check_namespace(self, namespace: str, ctx: Context) -> None:
        try:
            kv, _ = await self.store.get(self._namespaces.key(None, namespace))
        except StoreError as e:
            raise store_error(e) from None
        if kv is None:
            raise errors.not_found("namespaces", "", namespace)
        seen = self._terminating.get(namespace)
        if seen is not None and seen[0] == kv.mod_revision:
            terminating = seen[1]
        else:  # decoded once per version of the namespace, not on every create in it
            ns = decode_kv(kv)
            terminating = bool(ns["metadata"].get("deletionTimestamp")
                               or (ns.get("status") or {}).get("phase") == "Terminating")
            if len(self._terminating) >= NAMESPACES_REMEMBERED:
                self._terminating.clear()
            self._terminating[namespace] = (kv.mod_revision, terminating)
        if terminating:
            message = f"unable to create new content in namespace {namespace} because it is being terminated"
            raise errors.StatusError(403, "Forbidden", message, {
                "name": namespace, "kind": "namespaces",
                "causes": [{"reason": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}]})

    async def ensure_system_namespaces(self) -> None:
        """default, kube-system, kube-public and kube-node-lease exist (kube's system namespaces controller)."""
        for name in SYSTEM_NAMESPACES:
            try:
                await self._namespaces.create(None, {"metadata": {"name": name}}, Context(field_manager="nodeagent"))
            except errors.StatusError as e:
                if e.code != 409:
                    raise

    async def close(self) -> None:
        for gs in self.stores.values():
            await gs.hub.close()
