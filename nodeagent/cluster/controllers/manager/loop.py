"""The worker loop every controller shares (processNextWorkItem): take a key, sync it, forget its
back-off on success (and look again after the delay the sync asked for), requeue it rate-limited
on failure. A key is with one worker at a time (the queue sees to that)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import Any

import structlog

from nodeagent.cluster.controllers.common.meta import key, labels, namespace, spec, uid
from nodeagent.cluster.controllers.common.selectors import matches
from nodeagent.cluster.controllers.manager.client import ApiError
from nodeagent.cluster.controllers.manager.informer import Informer
from nodeagent.cluster.controllers.manager.queue import WorkQueue
from nodeagent.core.clock import Clock

log = structlog.get_logger(__name__)


class Controller:
    """A subclass sets `name` and implements `sync(key) -> requeue after (seconds) or None`,
    raising to be retried with back-off."""

    name = "controller"
    workers = 1

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queue = WorkQueue(clock, name=self.name)
        self.syncs = self.failures = 0

    async def sync(self, key: str) -> float | None:
        raise NotImplementedError

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    @staticmethod
    def owner_key(owners: Informer, kind: str, ref: Mapping[str, Any] | None, ns: str) -> str | None:
        """resolveControllerRef: the key of the `kind` (of `owners`' API group) in `owners`' cache with
        the referenced uid."""
        group = owners.api_version.rpartition("/")[0]
        if ref is None or ref.get("kind") != kind or str(ref.get("apiVersion", "")).rpartition("/")[0] != group:
            return None
        k = f"{ns}/{ref.get('name')}"
        owner = owners.get(k)
        return k if owner is not None and uid(owner) == str(ref.get("uid") or "") else None

    def enqueue_selecting(self, owners: Informer, orphan: Mapping[str, Any]) -> None:
        """An orphan: every owner of its namespace whose selector matches it may adopt it."""
        for owner in owners.in_namespace(namespace(orphan)):
            if matches(spec(owner).get("selector"), labels(orphan)):
                self.enqueue(key(owner))

    async def process_one(self, key: Hashable) -> None:
        self.syncs += 1
        try:
            after = await self.sync(str(key))
        except Exception as e:  # noqa: BLE001  (a failed sync is retried with back-off, never fatal)
            self.failures += 1
            expected = isinstance(e, ApiError) and (e.conflict or e.already_exists or e.not_found)
            (log.debug if expected else log.warning)(
                "controller_sync_failed", controller=self.name, key=str(key), error=str(e),
                requeues=self.queue.num_requeues(key),
            )
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
            if after is not None:
                self.queue.add_after(key, after)
        finally:
            self.queue.done(key)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            await self.process_one(key)

    async def run(self) -> None:
        log.info("controller_started", controller=self.name, workers=self.workers)
        try:
            await asyncio.gather(*(self._worker() for _ in range(self.workers)))
        finally:
            self.queue.shutdown()
