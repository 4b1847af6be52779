"""The scheduler's memory: every object, the node table, quota usage, and their writes to the store.

One rule keeps the node table and the quotas true whatever happened to a pod: after any change,
`account(rec)` re-derives what the pod should count, from its object alone:
- in the node table while it has a node and is not terminal (terminating pods still hold their
  resources until the agent has stopped them);
- against its namespace's quotas while it is neither terminal nor being deleted.
A preemptor's nomination reserves its requests on the nominated node (a table entry of its own),
so that room freed by its victims is not taken by a lower-priority pod first. Static pods that
agents report are counted under keys of their own (they use the node but are not ours).
Everything here runs on the event loop; the store writes go to the writer thread (AsyncStore).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

import structlog

from nodeagent.cluster.admission.priority import PriorityClassRegistry, parse_priority_class
from nodeagent.cluster.admission.quota import ResourceQuota, charge, compute_used, parse_resource_quota, pod_usage
from nodeagent.cluster.config import NodeEntry
from nodeagent.cluster.objects import PodRecord, agent_manifest, namespace_object, record_from
from nodeagent.cluster.scheduler.framework import Framework, PodInfo, ScoringConfig
from nodeagent.cluster.scheduler.node_table import NOMINATED, NodeSpec, NodeTable
from nodeagent.cluster.scheduler.nodes import NodeState, is_ready, node_spec
from nodeagent.cluster.store.sqlite import Revisions, SchedulerSnapshot
from nodeagent.core.clock import Clock
from nodeagent.core.model import parse_pod
from nodeagent.core.quantity import Quantity

log = structlog.get_logger(__name__)

FOREIGN = "\x00foreign/"  # table keys of static pods the agents run


class ClusterState:
    def __init__(self, store: Revisions, clock: Clock, *, scoring: str = "LeastAllocated",
                 grace: float = 40.0) -> None:
        self.store, self.clock, self.grace = store, clock, grace
        self.table = NodeTable()
        self.framework = Framework(self.table, ScoringConfig(strategy=scoring))  # type: ignore[arg-type]
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, PodRecord] = {}
        self.by_node: dict[str, set[str]] = {}  # node -> keys of the pods bound to it
        self._indexed: dict[str, str] = {}  # pod key -> the node by_node lists it under
        self.priority = PriorityClassRegistry()
        self.priority_objects: dict[str, dict[str, Any]] = {}
        self.quotas: dict[str, ResourceQuota] = {}  # "ns/name"
        self.quota_objects: dict[str, dict[str, Any]] = {}
        self.quota_used: dict[str, dict[str, Quantity]] = {}
        self.nodes: dict[str, NodeState] = {}
        self.charged: set[str] = set()
        self.nominations: dict[str, str] = {}  # pod key -> node it reserves
        self.nominated_on: dict[str, set[str]] = {}  # node -> pods that reserve room there
        self.foreign: dict[str, set[str]] = {}  # node -> table keys of static pods there

    # ---- loading -----------------------------------------------------------------------------
    def load(self, snapshot: SchedulerSnapshot, configured: Iterable[NodeEntry]) -> list[str]:
        """Rebuild memory from the store; returns problems (objects that no longer parse)."""
        problems: list[str] = []
        now = self.clock.now()
        for entry in configured:
            self.nodes[entry.name] = NodeState(entry.name, entry.url, configured=True, not_ready_since=now)
        for name, node_obj in snapshot.get("nodes", {}).items():
            st = self.nodes.setdefault(name, NodeState(name, not_ready_since=now))
            st.unschedulable = bool(node_obj.get("unschedulable"))
            st.registered = bool(node_obj.get("registered"))
            if not st.configured:
                st.url = node_obj.get("url")
        for name in self.nodes:
            self._upsert(name)
        self.namespaces.update(snapshot.get("namespaces", {}))
        for name, obj in snapshot.get("priorityclasses", {}).items():
            try:
                self.priority.add(parse_priority_class(_bare(obj)))
                self.priority_objects[name] = obj
            except ValueError as e:
                problems.append(f"priorityclasses/{name}: {e}")
        for key, quota_obj in snapshot.get("resourcequotas", {}).items():
            try:
                self.quotas[key] = parse_resource_quota(_bare(quota_obj))
                self.quota_objects[key] = quota_obj
                self.quota_used[key] = compute_used(self.quotas[key], ())
            except ValueError as e:
                problems.append(f"resourcequotas/{key}: {e}")
        for key, pod_obj in snapshot.get("pods", {}).items():
            try:
                rec = record_from(pod_obj)
            except ValueError as e:
                problems.append(f"pods/{key}: {e}")
                continue
            self.pods[key] = rec
            self.account(rec)
            if rec.nominated and rec.node is None and not rec.deleting and rec.nominated in self.nodes:
                self.reserve(rec, rec.nominated)
        return problems

    # ---- nodes -------------------------------------------------------------------------------
    def node(self, name: str) -> NodeState:
        """The node's state, creating an unknown (NotReady) one; its table row exists after."""
        st = self.nodes.get(name)
        if st is None:
            st = self.nodes[name] = NodeState(name, not_ready_since=self.clock.now())
            self._upsert(name)
        return st

    def _upsert(self, name: str) -> NodeSpec:
        spec = node_spec(self.nodes[name], self.clock.now(), self.grace)
        if name not in self.table.index or self.table.spec(name) != spec:
            self.table.upsert(spec)
        return spec

    def refresh_node(self, name: str, reported: bool = False) -> tuple[bool, bool, bool]:
        """Re-derive the node's table row: (was ready, is ready, the row changed). Without a new
        report (`reported`) or cordon only time can change it, through readiness: the row is
        rebuilt only then (the monitor asks for every node every second)."""
        st = self.nodes[name]
        old = self.table.spec(name) if name in self.table.index else None
        ready = is_ready(st, self.clock.now(), self.grace)
        if ready:
            st.not_ready_since = None
        elif st.not_ready_since is None:
            st.not_ready_since = self.clock.now()
        if not reported and old is not None and old.ready == ready:
            return old.ready, ready, False
        new = self._upsert(name)
        return (old is not None and old.ready), ready, new != old

    def forget_node(self, name: str) -> None:
        for key in list(self.nominated_on.get(name, ())):
            if key in self.pods:
                self.unreserve(self.pods[key])
        self.nominated_on.pop(name, None)
        self.nodes.pop(name, None)
        self.by_node.pop(name, None)
        self.foreign.pop(name, None)
        if name in self.table.index:
            self.table.remove(name)

    def save_node(self, st: NodeState) -> asyncio.Future[None]:
        return self.store.put("nodes", st.name, st.record())

    # ---- pods --------------------------------------------------------------------------------
    def account(self, rec: PodRecord) -> None:
        """Make the table, the node index and the quotas count `rec` as its object says."""
        key, node = rec.key, rec.node
        bound = self.table.bound.get(key)
        want = node is not None and not rec.terminal
        if bound is not None and (not want or bound.node != node):
            self.table.unbind(key)
            bound = None
        if want and bound is None:
            assert node is not None
            self.node(node)
            self.table.bind(rec.info, node)
        self._index(key, node)
        charged = not rec.terminal and not rec.deleting
        if charged != (key in self.charged):
            self._charge(rec, 1 if charged else -1)

    def _charge(self, rec: PodRecord, sign: int) -> None:
        (self.charged.add if sign > 0 else self.charged.discard)(rec.key)
        ns = rec.pod.metadata.namespace
        usage = pod_usage(rec.pod)
        for qkey, quota in self.quotas.items():
            if quota.namespace == ns:
                self.quota_used[qkey] = charge(quota, self.quota_used[qkey], usage, sign)

    def save_pod(self, rec: PodRecord) -> asyncio.Future[None]:
        return self.store.put("pods", rec.key, rec.obj)

    def add_pod(self, rec: PodRecord) -> asyncio.Future[None]:
        self.pods[rec.key] = rec
        rec.changed_at = self.clock.now()
        self.account(rec)
        return self.save_pod(rec)

    def drop_pod(self, rec: PodRecord) -> asyncio.Future[None]:
        """Forget the pod (its deletion is complete): table, quotas, store."""
        if self.pods.get(rec.key) is rec:
            del self.pods[rec.key]
        self.unreserve(rec)
        if rec.key in self.table.bound:
            self.table.unbind(rec.key)
        if rec.key in self.charged:
            self._charge(rec, -1)
        self._index(rec.key, None)
        return self.store.delete("pods", rec.key)

    def _index(self, key: str, node: str | None) -> None:
        old = self._indexed.get(key)
        if old == node:
            return
        if old is not None:
            self.by_node.get(old, set()).discard(key)
            del self._indexed[key]
        if node is not None:
            self.by_node.setdefault(node, set()).add(key)
            self._indexed[key] = node

    def reserve(self, rec: PodRecord, node: str) -> None:
        self.unreserve(rec)
        self.node(node)
        if rec.reservation is None or rec.reservation.key != NOMINATED + rec.key:
            rec.reservation = dataclasses.replace(rec.info, key=NOMINATED + rec.key)
        self.table.bind(rec.reservation, node)
        self.nominations[rec.key] = node
        self.nominated_on.setdefault(node, set()).add(rec.key)

    def unreserve(self, rec: PodRecord) -> None:
        node = self.nominations.pop(rec.key, None)
        if node is not None:
            self.table.unbind(NOMINATED + rec.key)
            self.nominated_on[node].discard(rec.key)

    def set_foreign(self, node: str, pods: dict[str, dict[str, Any]]) -> None:
        """The static (and unknown terminating) pods the agent runs: counted, never stored."""
        old = self.foreign.get(node, set())
        new: set[str] = set()
        for key, ap in pods.items():
            tkey = f"{FOREIGN}{node}/{key}"
            if (ap.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            new.add(tkey)
            if tkey in self.table.bound:
                continue
            try:
                pod = parse_pod(agent_manifest({**ap, "spec": ap.get("spec") or {}}))
            except ValueError as e:
                log.warning("foreign_pod_unreadable", node=node, pod=key, error=str(e))
                continue
            self.table.bind(dataclasses.replace(PodInfo.from_pod(pod), key=tkey), node)
        for tkey in old - new:
            if tkey in self.table.bound:
                self.table.unbind(tkey)
        self.foreign[node] = new

    # ---- quotas ------------------------------------------------------------------------------
    def quotas_in(self, ns: str) -> list[tuple[str, ResourceQuota]]:
        return [(k, q) for k, q in self.quotas.items() if q.namespace == ns]

    def add_quota(self, key: str, quota: ResourceQuota, obj: dict[str, Any]) -> asyncio.Future[None]:
        self.quotas[key] = quota
        self.quota_objects[key] = obj
        self.quota_used[key] = compute_used(quota, (self.pods[k].pod for k in self.charged if k in self.pods))
        return self.store.put("resourcequotas", key, obj)

    def remove_quota(self, key: str) -> asyncio.Future[None]:
        self.quotas.pop(key, None)
        self.quota_objects.pop(key, None)
        self.quota_used.pop(key, None)
        return self.store.delete("resourcequotas", key)

    # ---- namespaces --------------------------------------------------------------------------
    def ensure_namespace(self, name: str) -> asyncio.Future[None] | None:
        if name in self.namespaces:
            return None
        obj = self.namespaces[name] = namespace_object(name, self.clock.wall())
        return self.store.put("namespaces", name, obj)


def _bare(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object without the server's metadata and status, for the core's parsers."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items()
            if k in ("name", "namespace", "labels", "annotations")}
    return {k: v for k, v in {**obj, "metadata": meta}.items() if k != "status"}
