"""The ServiceAccounts controller's and the root-CA publisher's thin loops (kube-controller-manager's
`serviceaccount` and `root-ca-cert-publisher`), around serviceaccount/accounts.py and rootca.py.

Both key on the namespace name: a namespace added or updated is synced, and so is the namespace of
a ServiceAccount deleted (the default account comes back) or of a `kube-root-ca.crt` ConfigMap
changed or deleted (the CA comes back). A create refused because the namespace is gone or being
terminated, or because the object is there after all (a stale cache), is the goal reached or moot,
as upstream treats it; any other failure is retried with back-off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.meta import name, namespace
from nodeagent.cluster.controllers.manager.client import ApiError, Client
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.cluster.controllers.serviceaccount import accounts, rootca
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]


def _moot(e: Exception) -> bool:
    """A create whose namespace is gone or terminating (403 NamespaceTerminating), or whose object
    exists already: nothing to retry."""
    return isinstance(e, ApiError) and (e.not_found or e.already_exists
                                        or (e.code == 403 and "being terminated" in e.message))


class _PerNamespace(Controller):
    """Namespace events enqueue the namespace's name."""

    def __init__(self, clock: Clock, client: Client, component: str, namespaces: Informer) -> None:
        super().__init__(clock)
        self.namespaces = namespaces
        self.executor = Executor(client, None, component)
        namespaces.add_handlers(Handlers(lambda ns: self.enqueue(name(ns)), lambda _o, ns: self.enqueue(name(ns))))

    async def _run(self, plan: Any) -> None:
        outcome = await self.executor.run(plan, keep_going=True)
        if outcome.error is not None and not _moot(outcome.error):
            raise outcome.error


class ServiceAccountsController(_PerNamespace):
    name = "serviceaccount"
    workers = 1

    def __init__(self, clock: Clock, client: Client, *, namespaces: Informer, serviceaccounts: Informer) -> None:
        super().__init__(clock, client, "service-account-controller", namespaces)
        self.serviceaccounts = serviceaccounts
        serviceaccounts.add_handlers(Handlers(on_delete=lambda sa: self.enqueue(namespace(sa))))

    async def sync(self, k: str) -> float | None:
        existing = {name(sa) for sa in self.serviceaccounts.in_namespace(k)}
        await self._run(accounts.decide(self.namespaces.get(k), existing))
        return None


class RootCACertPublisher(_PerNamespace):
    name = "root-ca-cert-publisher"
    workers = 1

    def __init__(self, clock: Clock, client: Client, *, namespaces: Informer, configmaps: Informer,
                 root_ca: str) -> None:
        super().__init__(clock, client, "root-ca-cert-publisher", namespaces)
        self.configmaps, self.root_ca = configmaps, root_ca
        configmaps.add_handlers(Handlers(on_update=lambda _o, cm: self._configmap(cm), on_delete=self._configmap))

    def _configmap(self, cm: Obj) -> None:
        if name(cm) == rootca.CONFIGMAP:
            self.enqueue(namespace(cm))

    async def sync(self, k: str) -> float | None:
        cm = self.configmaps.get(f"{k}/{rootca.CONFIGMAP}")
        await self._run(rootca.decide(self.namespaces.get(k), cm, self.root_ca))
        return None
