"""`nodeagent server run`: the composition root of the Kubernetes-speaking control plane.

It only wires: the store (from the config, or given by the caller), the registry with the pieces
of the rooms beside it (field validation and OpenAPI from the schema room, patches and
managedFields from the patch room), the HTTP application, and the listening socket; it owns the process's lifetime
(SIGTERM/SIGINT stop it, watches are ended, the store is closed last).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.openapi import CatalogOpenAPI
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.registry.fieldcheck import SchemaFieldValidator
from nodeagent.cluster.registry.patching import RegistryFieldManager, RegistryPatcher
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import Plugins
from nodeagent.cluster.serverconfig import ServerConfig
from nodeagent.cluster.storage.compactor import Compactor
from nodeagent.cluster.storage.interface import Store
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore
from nodeagent.core.clock import Clock, SystemClock

log = structlog.get_logger(__name__)

StoreFactory = Callable[[ServerConfig], Awaitable[Store]]


async def open_store(config: ServerConfig) -> Store:
    """The configured backend: SQLite at storage.path (durable), or memory (nothing survives a restart)."""
    if config.storage.backend == "memory":
        return MemoryStore()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return await SqliteStore.open(config.storage.path)


def plugins(clock: Clock) -> Plugins:
    """The registry's plugins: field validation (schema room), patches and managedFields (patch room)."""
    return Plugins(validator=SchemaFieldValidator(), patcher=RegistryPatcher(clock),
                   field_manager=RegistryFieldManager(clock))


class ControlPlane:
    def __init__(self, config: ServerConfig, *, store_factory: StoreFactory = open_store,
                 clock: Clock | None = None) -> None:
        self.config, self.store_factory = config, store_factory
        self.clock = clock or SystemClock()
        self.port: int | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, ready: Callable[[int], None] | None = None) -> None:
        store = await self.store_factory(self.config)
        registry = Registry(store, self.clock, plugins=plugins(self.clock))
        runner: web.AppRunner | None = None
        compactor = asyncio.create_task(Compactor(store, self.config.compaction_interval, self.clock).run(),
                                        name="compactor")
        try:
            await registry.ensure_system_namespaces()
            settings = ApiSettings(self.clock, bookmark_interval=self.config.watch_bookmark_interval)
            app = create_kube_app(registry, settings, openapi=CatalogOpenAPI(registry.catalog))
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
            await runner.setup()
            site = web.TCPSite(runner, self.config.address, self.config.port)
            await site.start()
            bound = runner.addresses
            self.port = int(bound[0][1]) if bound else self.config.port
            log.info("server_listening", address=self.config.address, port=self.port,
                     storage=self.config.storage.backend, revision=store.revision)
            if ready is not None:
                ready(self.port)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.stop)
            await self._stop.wait()
            log.info("server_stopping")
        finally:
            compactor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await compactor
            await registry.close()
            if runner is not None:
                await runner.cleanup()
            await store.close()
