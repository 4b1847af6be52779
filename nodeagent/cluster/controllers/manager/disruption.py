"""The disruption controller's thin loop (disruption.go around the pure core in disruption/status.py).

Handlers turn budget and pod events into budget keys (a pod wakes every budget of its namespace
that selects it, before and after a label change; a workload whose spec.replicas changes wakes the
budgets of its namespace, since percentages are taken of it). `sync` reads the caches, resolves the
scale of the pods' controllers (upstream's finders: a ReplicaSet not owned by a Deployment, the
Deployment through its ReplicaSet, a StatefulSet, and any other served kind through its
spec.replicas, read uncached as the scale client would), asks the core for the status and writes it
through /status. A sync that could not compute the status writes the fail-safe one
(disruptionsAllowed 0, DisruptionAllowed=False SyncFailed) and is retried with back-off; a budget
with pods recently evicted is looked at again when their DeletionTimeout runs out.

Pods with a DisruptionTarget condition not followed by a delete get keys of their own
(`stale-pod:<ns>/<name>`, upstream's second queue), due when the condition is 2 minutes old; the
sync sets it back to False (disruption/stale.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.cluster.controllers.common.actions import UpdateStatus
from nodeagent.cluster.controllers.common.meta import controller_ref, key, labels, name, namespace, spec, uid
from nodeagent.cluster.controllers.common.selectors import matches
from nodeagent.cluster.controllers.disruption import stale
from nodeagent.cluster.controllers.disruption import status as pdbstatus
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock

Obj = Mapping[str, Any]
Found = tuple[str, int] | None
STALE = "stale-pod:"  # the key prefix of a pod whose DisruptionTarget condition may be stale


class SyncFailed(Exception):
    """The budget's status could not be computed; the fail-safe status was written."""


def _replicas(obj: Obj) -> int:
    r = spec(obj).get("replicas", 1)
    return r if isinstance(r, int) and not isinstance(r, bool) else 1


def _is_apps(ref: Mapping[str, Any], kind: str) -> bool:
    return ref.get("kind") == kind and str(ref.get("apiVersion", "")).startswith("apps/")


class DisruptionController(Controller):
    name = "disruption"
    workers = 1

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, pdbs: Informer, pods: Informer,
                 replicasets: Informer, deployments: Informer, statefulsets: Informer) -> None:
        super().__init__(clock)
        self.client = client
        self.pdbs, self.pods = pdbs, pods
        self.rss, self.deployments, self.statefulsets = replicasets, deployments, statefulsets
        self.executor = Executor(client, recorder, "disruption-controller")
        pdbs.add_handlers(Handlers(self._pdb_changed, lambda _o, n: self._pdb_changed(n), self._pdb_changed))
        pods.add_handlers(Handlers(self._pod_added, self._pod_updated, self._pod_changed))
        for workloads in (replicasets, deployments, statefulsets):
            workloads.add_handlers(Handlers(on_update=self._workload_updated))

    # ---- handlers ----
    def _pdb_changed(self, pdb: Obj) -> None:
        self.enqueue(key(pdb))

    def _pod_changed(self, pod: Obj) -> None:
        """getPdbForPod: the budgets of the pod's namespace whose selector takes it."""
        for pdb in self.pdbs.in_namespace(namespace(pod)):
            if matches(spec(pdb).get("selector"), labels(pod)):
                self.enqueue(key(pdb))

    def _pod_added(self, pod: Obj) -> None:
        self._pod_changed(pod)
        self._check_stale(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_changed(new)
        if labels(old) != labels(new):
            self._pod_changed(old)
        self._check_stale(new)

    def _check_stale(self, pod: Obj) -> None:
        wait = stale.stale_in(pod, self.clock.wall())
        if wait is not None:
            self.queue.add_after(STALE + key(pod), wait)

    def _workload_updated(self, old: Obj, new: Obj) -> None:
        if _replicas(old) != _replicas(new):
            for pdb in self.pdbs.in_namespace(namespace(new)):
                self.enqueue(key(pdb))

    # ---- the finders ----
    def _cached(self, ref: Mapping[str, Any], ns: str) -> Found | bool:
        """A finder over the caches: the (uid, scale) found, None for none, False when the kind is
        not one the caches hold (the uncached scale lookup decides)."""
        if _is_apps(ref, "ReplicaSet"):
            rs = self.rss.get(f"{ns}/{ref.get('name')}")
            if rs is None or uid(rs) != ref.get("uid"):
                return None
            owner = controller_ref(rs)
            if owner is not None and _is_apps(owner, "Deployment"):
                d = self.deployments.get(f"{ns}/{owner.get('name')}")
                if d is not None and uid(d) == owner.get("uid"):
                    return uid(d), _replicas(d)
            return uid(rs), _replicas(rs)
        if _is_apps(ref, "StatefulSet"):
            ss = self.statefulsets.get(f"{ns}/{ref.get('name')}")
            return (uid(ss), _replicas(ss)) if ss is not None and uid(ss) == ref.get("uid") else None
        return False

    async def _uncached(self, ref: Mapping[str, Any], ns: str) -> Found:
        """getScaleController: any other served kind with spec.replicas and the referenced uid."""
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        namespaced = self.client.namespaced(api_version, kind)
        if namespaced is None:
            return None
        try:
            obj = await self.client.resource(api_version, kind).get(ns if namespaced else "", str(ref.get("name")))
        except ApiError as e:
            if e.not_found:
                return None
            raise
        r = spec(obj).get("replicas")
        if uid(obj) != ref.get("uid") or not isinstance(r, int) or isinstance(r, bool):
            return None
        return uid(obj), r

    async def _scales(self, pods: list[Obj], ns: str) -> dict[str, Found]:
        """Every pod controller's (uid, scale), by the controller's uid."""
        out: dict[str, Found] = {}
        for p in pods:
            ref = controller_ref(p)
            if ref is None or str(ref.get("uid")) in out:
                continue
            found = self._cached(ref, ns)
            out[str(ref.get("uid"))] = await self._uncached(ref, ns) if isinstance(found, bool) else found
        return out

    # ---- sync ----
    async def sync(self, k: str) -> float | None:
        if k.startswith(STALE):
            return await self._sync_stale(k.removeprefix(STALE))
        pdb = self.pdbs.get(k)
        if pdb is None:
            return None
        ns = namespace(pdb)
        pods = pdbstatus.matching_pods(pdb, self.pods.in_namespace(ns))
        scales = await self._scales(pods, ns)
        plan = pdbstatus.sync(pdb, pods, lambda ref, _ns: scales.get(str(ref.get("uid"))), now=self.clock.wall())
        outcome = await self.executor.run(plan)
        if outcome.error is not None:
            raise outcome.error
        if any(a.reason == "PDBFailSafe" for a in plan.of_type(UpdateStatus)):
            raise SyncFailed(f"PodDisruptionBudget {name(pdb)}: the status could not be computed")
        return outcome.requeue_after

    async def _sync_stale(self, pod_key: str) -> float | None:
        pod = self.pods.get(pod_key)
        if pod is None:
            return None
        outcome = await self.executor.run(stale.reset(pod, self.clock.wall()))
        if outcome.error is not None:
            raise outcome.error
        return outcome.requeue_after
