"""`nodeagent server run`: the composition root of the Kubernetes-speaking control plane.

It only wires: the store (from the config, or given by the caller), the registry with the pieces
of the rooms beside it (field validation and OpenAPI from the schema room, patches and
managedFields from the patch room), the HTTP application, and the listening socket; it owns the process's lifetime
(SIGTERM/SIGINT stop it, watches are ended, the store is closed last). Every long-lived task (the
compactor, the index feeds, the quota status writer, the event recorder, the scheduler, the
controller-manager) is started through one GuardedTasks (daemonkit/tasks.py), which logs a task that
dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import signal
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog
from aiohttp import web

from nodeagent.cluster.admitters.chain import AdmissionChain
from nodeagent.cluster.admitters.noderestriction import NodeRestrictionAdmission
from nodeagent.cluster.admitters.quota import QuotaStatus
from nodeagent.cluster.apiserver.binding import add_binding
from nodeagent.cluster.apiserver.custom_metrics_api import add_custom_metrics
from nodeagent.cluster.apiserver.eviction import add_eviction
from nodeagent.cluster.apiserver.kubeapi import create_kube_app
from nodeagent.cluster.apiserver.metrics_api import agent_credentials, start_metrics
from nodeagent.cluster.apiserver.nodeproxy import add_node_proxy
from nodeagent.cluster.apiserver.openapi import CatalogOpenAPI
from nodeagent.cluster.apiserver.podexec import add_pod_attach, add_pod_exec
from nodeagent.cluster.apiserver.podlog import AgentProxy, add_pod_log
from nodeagent.cluster.apiserver.resources import ApiSettings
from nodeagent.cluster.apiserver.scale import to_scale
from nodeagent.cluster.apiserver.security import EscalationAdmission, Security, build_security
from nodeagent.cluster.apiserver.tokenrequest import ServiceAccountTokens, add_token_request
from nodeagent.cluster.apiserver.whoami import add_self_subject_review
from nodeagent.cluster.auth.encryption import load_encryption_config
from nodeagent.cluster.auth.pki import default_hosts, ensure_pki, server_ssl_context
from nodeagent.cluster.auth.rbac import bootstrap
from nodeagent.cluster.autoscaling.hpa.controller import ControllerConfig
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.replicas import CalculatorConfig
from nodeagent.cluster.autoscaling.metrics.external import PrometheusSource
from nodeagent.cluster.autoscaling.metrics.scrape import MetricsStore
from nodeagent.cluster.autoscaling.vpa.recommender import RecommenderConfig
from nodeagent.cluster.autoscaling.vpa.updater import UpdaterConfig
from nodeagent.cluster.controllers.manager.client import FIELD_MANAGER, USER, ApiError, Obj
from nodeagent.cluster.controllers.manager.horizontal import HorizontalSettings
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controllers.manager.vertical import VerticalSettings
from nodeagent.cluster.events.recorder import EventRecorder
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.encrypted import EncryptedStore
from nodeagent.cluster.registry.errors import StatusError
from nodeagent.cluster.registry.eviction import evict
from nodeagent.cluster.registry.fieldcheck import SchemaFieldValidator
from nodeagent.cluster.registry.options import Context, DeleteOptions, ListOptions
from nodeagent.cluster.registry.patching import RegistryFieldManager, RegistryPatcher
from nodeagent.cluster.registry.plugins import Admitter
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.registry.store import GenericStore, Plugins
from nodeagent.cluster.registry.watch import Subscription
from nodeagent.cluster.scheduling.cache import SchedulerCache
from nodeagent.cluster.scheduling.scheduler import Scheduler
from nodeagent.cluster.serverconfig import ServerConfig
from nodeagent.cluster.storage.compactor import Compactor
from nodeagent.cluster.storage.interface import Store
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.cluster.storage.sqlite import SqliteStore
from nodeagent.core.clock import Clock, SystemClock
from nodeagent.daemonkit.tasks import GuardedTasks

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
        self.scheduler: Scheduler | None = None
        self.registry: Registry | None = None
        self.tokens: ServiceAccountTokens | None = None  # service-account tokens, when security is on
        self.controllers: ControllerManager | None = None
        self.root_ca: str | None = None  # the CA bundle verifying the serving certificate, when the server made it
        self._stop = asyncio.Event()
        self._feeds: Feeds | None = None

    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, ready: Callable[[int], None] | None = None) -> None:
        store = await self.store_factory(self.config)
        security = self.config.security
        if security is not None and security.encryption_provider_config:
            try:
                encryption = load_encryption_config(security.encryption_provider_config)
            except BaseException:
                await store.close()
                raise
            store = EncryptedStore(store, encryption)
        registry = self.registry = Registry(store, self.clock, plugins=plugins(self.clock))
        runner: web.AppRunner | None = None
        recorder: EventRecorder | None = None
        pod_log: AgentProxy | None = None
        external: PrometheusSource | None = None
        tasks = GuardedTasks("server")
        self._feeds = Feeds(tasks)
        tasks.start(Compactor(store, self.config.compaction_interval, self.clock).run(), name="compactor",
                    forever=True)
        try:
            await registry.ensure_system_namespaces()
            settings = ApiSettings(self.clock, bookmark_interval=self.config.watch_bookmark_interval)
            tls: ssl.SSLContext | None = None
            extra: list[Admitter] = []
            first: list[Admitter] = []
            if self.config.security is not None:
                settings.security, tls = await self._security(registry, tasks)
                if settings.security.rbac is not None:
                    extra.append(EscalationAdmission(settings.security))
                if settings.security.graph is not None:  # the Node authorizer's admission half
                    first.append(NodeRestrictionAdmission(registry))
            await self._admission(registry, extra, tasks, first)
            if self.tokens is not None:
                add_token_request(registry, settings, self.tokens)  # kubectl create token
            add_binding(registry, settings)
            add_self_subject_review(registry, self.clock)  # kubectl auth whoami
            add_eviction(registry, settings)
            recorder = await self._scheduler(registry, tasks)
            credentials = await agent_credentials(self.config, self.clock)  # how the server dials the agents
            pod_log = add_pod_log(registry, settings, credentials)  # kubectl logs
            add_pod_exec(settings, pod_log)  # kubectl exec
            add_pod_attach(settings, pod_log)  # kubectl attach
            add_node_proxy(settings, pod_log)  # GET nodes/<n>/proxy/<path>
            metrics = await start_metrics(registry, self.config, self.clock, tasks, credentials)  # kubectl top, the HPA
            external = add_custom_metrics(metrics, self.config)  # custom and external metrics APIs
            await self._controller_manager(registry, tasks, metrics.store, external)
            app = create_kube_app(registry, settings, openapi=CatalogOpenAPI(registry.catalog),
                                  log_requests=self.config.logging.level == "debug", metrics=metrics)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
            await runner.setup()
            site = web.TCPSite(runner, self.config.address, self.config.port, ssl_context=tls)
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
            if self.scheduler is not None:
                await self.scheduler.close()
            if recorder is not None:
                await recorder.close()
            await tasks.close()
            await registry.close()
            if runner is not None:
                await runner.cleanup()
            if pod_log is not None:
                await pod_log.close()
            if external is not None:
                await external.close()
            await store.close()

    async def _follow(self, gs: GenericStore, apply: Callable[[str, dict[str, Any]], None]) -> None:
        assert self._feeds is not None  # made by run()
        await self._feeds.follow(gs, apply)

    async def _admission(self, registry: Registry, extra: list[Admitter], tasks: GuardedTasks,
                         first: list[Admitter]) -> None:
        """The admission chain (cluster/admitters) and the quota status writer, fed by pods and quotas."""
        chain = AdmissionChain(registry, extra=extra, first=first)
        registry.plugins.admitter = chain
        status = QuotaStatus(chain.quota.ledger)
        for plural in ("pods", "resourcequotas"):
            await self._follow(registry.resource("", "v1", plural), status.observe)
        tasks.start(status.run(), name="quota-status", forever=True)

    async def _scheduler(self, registry: Registry, tasks: GuardedTasks) -> EventRecorder:
        """The scheduler and its event recorder, its caches current (listed) before it starts."""
        recorder = EventRecorder(registry.resource("", "v1", "events"), self.clock, "default-scheduler")
        tasks.start(recorder.run(), name="event-recorder", forever=True)
        cache = SchedulerCache()
        pods = registry.resource("", "v1", "pods")
        self.scheduler = Scheduler(pods, cache, recorder, self.clock)
        for gs, apply in ((registry.resource("", "v1", "nodes"), cache.apply_node), (pods, cache.apply_pod),
                          (registry.resource("policy", "v1", "poddisruptionbudgets"), cache.apply_pdb)):
            await self._follow(gs, apply)
        tasks.start(self.scheduler.run(), name="scheduler", forever=True)
        return recorder

    async def _controller_manager(self, registry: Registry, tasks: GuardedTasks, metrics: MetricsStore,
                                  external: PrometheusSource | None = None) -> None:
        """The controllers (cluster/controllers/manager) over their shared informers, each fed by a
        list+watch of its resource and listed before any controller starts (WaitForCacheSync); the
        HPA reads the scrape's sample window."""
        enabled = self.config.enabled_controllers
        if not enabled:
            return
        client = RegistryClient(registry)

        def recorder(component: str) -> EventRecorder:
            rec = EventRecorder(registry.resource("", "v1", "events"), self.clock, component)
            tasks.start(rec.run(), name=f"event-recorder:{component}", forever=True)
            return rec

        manager = self.controllers = ControllerManager(client, self.clock, enabled=enabled, recorder=recorder,
                                                       node_lifecycle=self.config.node_lifecycle.settings(),
                                                       metrics=metrics.window,
                                                       hpa=hpa_settings(self.config, metrics.rate_window),
                                                       external_metrics=external,
                                                       vpa=vpa_settings(self.config), root_ca=self.root_ca)
        for (api_version, kind), informer in manager.informers.items():
            await self._follow(client.store(api_version, kind), informer.apply)
        tasks.start(manager.run(), name="controller-manager", forever=True)

    async def _security(self, registry: Registry, tasks: GuardedTasks) -> tuple[Security, ssl.SSLContext]:
        """Authentication, authorization and TLS from `security` (the auth room's pieces): the PKI made
        on first start, the RBAC index and the node graph fed by watches (current before serving), the
        bootstrap ClusterRoles and bindings created when missing."""
        sec_config = self.config.security
        assert sec_config is not None
        pki = await asyncio.to_thread(ensure_pki, self.config.tls_dir, default_hosts(sec_config.tls_san), self.clock)
        self.tokens = await asyncio.to_thread(ServiceAccountTokens, sec_config, pki, self.clock)
        security = build_security(token_file=sec_config.token_auth_file, anonymous=sec_config.anonymous_auth,
                                  anonymous_paths=sec_config.anonymous_auth_paths, modes=sec_config.authorization_mode,
                                  token_authenticators=[self.tokens.verifier])
        cert = sec_config.tls_cert_file or pki.serving_cert_file
        if not sec_config.tls_cert_file:  # a configured certificate's CA is not known here: nothing to publish
            self.root_ca = pki.server_ca.cert_pem.decode()
        key = sec_config.tls_private_key_file or pki.serving_key_file
        tls = server_ssl_context(cert, key, sec_config.client_ca_file or pki.client_ca_file)
        ctx = Context(field_manager="nodeagent-bootstrap")
        for group, plural, objects in (("rbac.authorization.k8s.io", "clusterroles", bootstrap.cluster_roles()),
                                       ("rbac.authorization.k8s.io", "clusterrolebindings",
                                        bootstrap.cluster_role_bindings())):
            gs = registry.resource(group, "v1", plural)
            for obj in objects:
                with contextlib.suppress(StatusError):  # already there (409): the stored one stays
                    await gs.create(None, obj, ctx)
        follow: list[tuple[GenericStore, Callable[[str, dict[str, Any]], None]]] = []
        if security.rbac is not None:
            for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings"):
                follow.append((registry.resource("rbac.authorization.k8s.io", "v1", plural), security.rbac.apply))
        if security.graph is not None:
            follow.append((registry.resource("", "v1", "pods"), security.graph.apply))
        for plural in ("serviceaccounts", "pods"):  # the token verifier's revocation look-ups
            follow.append((registry.resource("", "v1", plural), self.tokens.index.apply))
        for gs, apply in follow:
            await self._follow(gs, apply)
        log.info("security_on", modes=",".join(sec_config.authorization_mode), tls_dir=str(self.config.tls_dir),
                 token_file=bool(sec_config.token_auth_file))
        return security, tls


def hpa_settings(config: ServerConfig, metric_window: float) -> HorizontalSettings:
    """The HPA controller's settings from the config; values are read over the scrape's rate window,
    back from a sample at most a scrape (and its slack) old."""
    hpa = config.horizontal_pod_autoscaler
    controller = ControllerConfig(hpa.tolerance, hpa.downscale_stabilization,
                                  CalculatorConfig(hpa.cpu_initialization_period, hpa.initial_readiness_delay))
    fast = FastConfig(down_stabilization=hpa.downscale_stabilization) if hpa.fast else None
    return HorizontalSettings(hpa.sync_period, controller, metric_window, fast, metric_max_age=metric_window)


def vpa_settings(config: ServerConfig) -> VerticalSettings:
    """The VPA loops' periods and flags from the config (the rest of the pure cores' settings keep
    upstream's defaults)."""
    vpa = config.vertical_pod_autoscaler
    return VerticalSettings(
        vpa.recommender_interval, vpa.checkpoint_interval, vpa.updater_interval,
        recommender=RecommenderConfig(pod_min_cpu_millicores=vpa.pod_recommendation_min_cpu_millicores,
                                      pod_min_memory_mb=vpa.pod_recommendation_min_memory_mb),
        updater=UpdaterConfig(pod_lifetime_threshold=vpa.in_recommendation_bounds_eviction_lifetime_threshold))


class Feed:
    """Keep indexes current from one resource's watch, as a shared informer does: list, then watch;
    when the watch closes, list again and tell the indexes about objects that went meanwhile.

    One feed per resource serves every in-process index of it (the scheduler's cache, the quota
    status, the controllers' informers, the token and node-authorizer indexes): one watch, one
    decoded object per version for all of them. Their objects leave out metadata.managedFields, as
    kube-scheduler's and kube-controller-manager's informers do (TransformStripManagedFields): no
    index reads them, and an update sent without them keeps the stored ones; with 10,000 pods they
    were more than half of each cached pod (bench/README.md, "The API server's memory")."""

    def __init__(self, gs: GenericStore, apply: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.gs = gs
        self.appliers: list[Callable[[str, dict[str, Any]], None]] = [apply] if apply is not None else []
        self.known: dict[tuple[str, str], dict[str, Any]] = {}
        self.sub: Subscription | None = None

    def add(self, apply: Callable[[str, dict[str, Any]], None]) -> None:
        """Feed one more index: every object known now as ADDED, then every change."""
        for obj in self.known.values():
            apply("ADDED", obj)
        self.appliers.append(apply)

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def _one(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.known.pop(self._key(obj), None)
        else:
            self.known[self._key(obj)] = obj
        for apply in self.appliers:
            apply(event_type, obj)

    async def relist(self) -> None:
        start = await self.gs.watch(None, ListOptions(watch=True))
        present = {self._key(i.object) for i in start.initial}
        for key in [k for k in self.known if k not in present]:
            self._one("DELETED", self.known[key])
        for item in start.initial:  # decoded for this list alone: trimmed in place
            meta = item.object.get("metadata")
            if isinstance(meta, dict):
                meta.pop("managedFields", None)
            self._one("MODIFIED" if self._key(item.object) in self.known else "ADDED", item.object)
        self.sub = start.subscription

    async def run(self) -> None:
        while True:
            assert self.sub is not None
            try:
                while True:
                    item = await self.sub.next(None)
                    if item is not None:
                        self._one(item.type, without_managed_fields(item.object))
            except StopAsyncIteration:
                log.info("index_feed_relist", resource=self.gs.info.plural)
            await self.relist()


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy without metadata.managedFields (the watch's object is shared with its HTTP watchers)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class Feeds:
    """The control plane's feeds, one per resource, started on first use."""

    def __init__(self, tasks: GuardedTasks) -> None:
        self.tasks = tasks
        self.feeds: dict[GenericStore, Feed] = {}

    async def follow(self, gs: GenericStore, apply: Callable[[str, dict[str, Any]], None]) -> None:
        """Keep `apply`'s index current, listed before this returns (WaitForCacheSync)."""
        feed = self.feeds.get(gs)
        if feed is not None:
            feed.add(apply)
            return
        feed = self.feeds[gs] = Feed(gs, apply)
        await feed.relist()
        self.tasks.start(feed.run(), name=f"feed:{gs.info.group or 'core'}/{gs.info.plural}", forever=True)


class RegistryClient:
    """The controller-manager's client: in-process registry calls as system:kube-controller-manager,
    through the same admission as an HTTP request (quotas and limit ranges hold for its pods), and
    the scale subresource of the kinds that have one (the HPA's scale client)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._by_kind: dict[tuple[str, str], ResourceInfo] = {}
        for info in registry.catalog:
            self._by_kind.setdefault((info.api_version, info.kind), info)

    def store(self, api_version: str, kind: str) -> GenericStore:
        info = self._by_kind[(api_version, kind)]
        return self.registry.resource(info.group, info.version, info.plural)

    def resource(self, api_version: str, kind: str) -> RegistryResource:
        return RegistryResource(self.store(api_version, kind))

    def namespaced(self, api_version: str, kind: str) -> bool | None:
        info = self._by_kind.get((api_version, kind))
        return None if info is None else info.namespaced

    async def evict(self, namespace: str, name: str) -> None:
        """POST pods/<name>/eviction (registry/eviction.py: PodDisruptionBudgets honoured, 429 when spent)."""
        pods = self.store("v1", "Pod")
        pdbs = self.store("policy/v1", "PodDisruptionBudget")
        ctx = Context(field_manager=FIELD_MANAGER, user=USER, groups=("system:authenticated",))
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            await evict(pods, pdbs, namespace, name, body, ctx)
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None

    async def resize(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> None:
        """PATCH pods/<name>/resize (a JSON patch); 404 while the server does not serve the subresource."""
        pods = self.store("v1", "Pod")
        if self.registry.catalog.subresource(pods.info, "resize") is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource (pods/resize)")
        ctx = Context(field_manager=FIELD_MANAGER, user=USER, groups=("system:authenticated",))
        try:
            await pods.patch(namespace or None, name, "json", [dict(op) for op in patch], ctx, subresource="resize")
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None

    def _scalable(self, api_version: str, kind: str) -> GenericStore:
        info = self._by_kind.get((api_version, kind))
        if info is None or self.registry.catalog.subresource(info, "scale") is None:
            group = api_version.rpartition("/")[0]
            raise ApiError(404, "NotFound", f'no matches for kind "{kind}" in group "{group}"'
                           if info is None else f"{info.qualified} has no scale subresource")
        return self.registry.resource(info.group, info.version, info.plural)

    async def get_scale(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        """GET <kind>/<name>/scale: the autoscaling/v1 Scale (apiserver/scale.py's)."""
        gs = self._scalable(api_version, kind)
        try:
            return to_scale(await gs.get(namespace or None, name))
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None

    async def update_scale(self, api_version: str, kind: str, namespace: str, name: str, replicas: int) -> Obj:
        """PUT <kind>/<name>/scale: only spec.replicas moves (the subresource's compare-and-swap)."""
        gs = self._scalable(api_version, kind)
        ctx = Context(field_manager=FIELD_MANAGER, user=USER, groups=("system:authenticated",))

        def mutate(old: Obj) -> Obj:
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["replicas"] = replicas
            return new

        try:
            return to_scale(await gs.guaranteed_update(namespace or None, name, mutate, ctx, subresource="scale"))
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None


class RegistryResource:
    def __init__(self, gs: GenericStore) -> None:
        self.gs = gs

    @staticmethod
    def _ctx() -> Context:
        return Context(field_manager=FIELD_MANAGER, user=USER, groups=("system:authenticated",))

    @staticmethod
    def _ns(namespace: str) -> str | None:
        return namespace or None

    async def get(self, namespace: str, name: str) -> Obj:
        try:
            return await self.gs.get(self._ns(namespace), name)
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None

    async def create(self, namespace: str, obj: Obj) -> Obj:
        try:
            return await self.gs.create(self._ns(namespace), obj, self._ctx())
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None

    async def update(self, namespace: str, obj: Obj, subresource: str = "") -> Obj:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            out, _ = await self.gs.update(self._ns(namespace), name, obj, self._ctx(), subresource=subresource)
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None
        return out

    async def patch(self, namespace: str, name: str, patch: Obj, patch_type: str, subresource: str = "") -> Obj:
        assert patch_type in ("json", "merge", "strategic")
        try:
            out, _ = await self.gs.patch(self._ns(namespace), name, patch_type, patch, self._ctx(),  # type: ignore[arg-type]
                                         subresource=subresource)
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None
        return out

    async def delete(self, namespace: str, name: str, *, uid: str | None = None, resource_version: str | None = None,
                     propagation: str | None = None, grace_period_seconds: int | None = None) -> None:
        assert propagation in (None, "Orphan", "Background", "Foreground")
        opts = DeleteOptions(grace_period_seconds=grace_period_seconds, uid=uid, resource_version=resource_version,
                             propagation_policy=propagation)  # type: ignore[arg-type]
        try:
            await self.gs.delete(self._ns(namespace), name, opts, self._ctx())
        except StatusError as e:
            raise ApiError(e.code, e.reason, e.message) from None
