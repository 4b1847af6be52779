"""The scheduler's cache: Nodes and Pods as the registry's watches show them, folded into the
scheduling core's NodeTable (kube-scheduler's internal cache plus its informers' handlers).

Fed by `apply_node` / `apply_pod` (a `Feed` per resource: list, then watch, relist when a watch
ends), so it is level-triggered: whatever it missed, the next relist restores. A bound pod
counts on its node until it is terminal or gone (terminating pods still hold their room, as
upstream). A pod of ours without spec.nodeName is pending and handed to `on_pending`.
"Assumed" pods are counted on the node the scheduler chose before the binding is written, so
the next cycle sees the room taken; the watch then confirms (or corrects) them. A preemptor's
nomination reserves its requests on the nominated node under a key of its own.
PodDisruptionBudgets (`apply_pdb`) are kept for preemption, which prefers victims they allow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from nodeagent.cluster.registry.kinds.pods import pod_model
from nodeagent.cluster.scheduler.framework import PREEMPT_LOWER_PRIORITY, Framework, PodInfo, ScoringConfig
from nodeagent.cluster.scheduler.node_table import NOMINATED, NodeTable
from nodeagent.cluster.scheduler.nodes import node_spec_of
from nodeagent.cluster.scheduler.preemption import Budget
from nodeagent.cluster.scheduler.requests import counted_status
from nodeagent.core.errors import ValidationErrors

log = structlog.get_logger(__name__)

TERMINAL = ("Succeeded", "Failed")
DEFAULT_SCHEDULER = "default-scheduler"
Obj = dict[str, Any]


def pod_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(eq=False)
class CachedPod:
    obj: Obj
    info: PodInfo

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"].get("uid", ""))

    @property
    def node(self) -> str | None:
        return (self.obj.get("spec") or {}).get("nodeName") or None

    @property
    def deleting(self) -> bool:
        return bool(self.obj["metadata"].get("deletionTimestamp"))

    @property
    def terminal(self) -> bool:
        return (self.obj.get("status") or {}).get("phase") in TERMINAL

    @property
    def nominated(self) -> str | None:
        return (self.obj.get("status") or {}).get("nominatedNodeName") or None


def pod_info(obj: Obj) -> PodInfo:
    """The core's view of a pod: requests, spec.priority (set by the Priority admission from its
    PriorityClass), preemptionPolicy, tolerations, nodeSelector, node affinity, and the labels,
    topology spread and pod anti-affinity the placement rules count with."""
    pod = pod_model(obj)
    spec = obj.get("spec") or {}
    info = PodInfo.from_pod(pod, preemption_policy=str(spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY),
                            obj=obj)
    info.key = pod_key(obj)
    return info


def same_but_node(old: Obj, new: Obj) -> bool:
    """Whether two pod specs are equal but for spec.nodeName (a binding): the PodInfo, which never
    reads the node, stays; the node the pod counts on is the object's."""
    if old == new:
        return True
    if len(old) - ("nodeName" in old) != len(new) - ("nodeName" in new):
        return False
    return all(k == "nodeName" or (k in new and new[k] == v) for k, v in old.items())


def _placement_meta(obj: Obj) -> tuple[Any, Any]:
    """What the placement rules read from metadata: a change re-counts the pod."""
    meta = obj.get("metadata") or {}
    return meta.get("labels"), meta.get("ownerReferences")


class SchedulerCache:
    def __init__(self, *, scheduler_name: str = DEFAULT_SCHEDULER, scoring: str = "LeastAllocated") -> None:
        self.scheduler_name = scheduler_name
        self.table = NodeTable()
        self.framework = Framework(self.table, ScoringConfig(strategy=scoring))  # type: ignore[arg-type]
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, CachedPod] = {}
        self.pending: dict[str, CachedPod] = {}
        self.orphans: dict[str, dict[str, CachedPod]] = {}  # node not known yet -> pods bound to it
        self.assumed: dict[str, str] = {}  # pod key -> node chosen, binding not yet seen
        self.nominations: dict[str, str] = {}  # pod key -> node its reservation is on
        self.on_pending: Callable[[CachedPod], None] = lambda cp: None
        self.on_change: Callable[[], None] = lambda: None  # room may have appeared
        # a pod was counted on a node: a pending pod's spread or pod affinity may be met now
        self.on_assigned: Callable[[], None] = lambda: None
        self.on_gone: Callable[[str], None] = lambda key: None
        self.budgets: dict[str, Budget] = {}  # PodDisruptionBudgets by namespace/name (preemption)

    # ---- budgets ---------------------------------------------------------------------------------
    def apply_pdb(self, event_type: str, obj: Obj) -> None:
        key = pod_key(obj)  # namespace/name
        if event_type == "DELETED":
            self.budgets.pop(key, None)
        else:
            self.budgets[key] = Budget.of(obj)

    # ---- nodes -----------------------------------------------------------------------------------
    def apply_node(self, event_type: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            self.nodes.pop(name, None)
            if name in self.table.index:
                for bp in self.table.remove(name):
                    if bp.key.startswith(NOMINATED):
                        self.nominations.pop(bp.key[len(NOMINATED):], None)
                        continue
                    self.assumed.pop(bp.key, None)
                    cp = self.pods.get(bp.key)
                    if cp is not None:
                        self.orphans.setdefault(name, {})[bp.key] = cp
            return
        self.nodes[name] = obj
        spec = node_spec_of(obj)
        if name not in self.table.index or self.table.spec(name) != spec:
            try:
                self.table.upsert(spec)
            except ValueError as e:  # FieldError: a negative allocatable; the node stays out
                log.warning("node_not_schedulable", node=name, error=str(e))
                return
            for cp in self.orphans.pop(name, {}).values():
                self.table.bind(cp.info, name)
            self.on_change()

    # ---- pods ------------------------------------------------------------------------------------
    def apply_pod(self, event_type: str, obj: Obj) -> None:
        key = pod_key(obj)
        old = self.pods.get(key)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if event_type == "DELETED" or (old is not None and old.uid != uid):
            self._forget(key)
            if event_type == "DELETED":
                return
            old = None
        spec = obj.get("spec") or {}
        if old is not None and same_but_node(old.obj.get("spec") or {}, spec) \
                and _placement_meta(old.obj) == _placement_meta(obj) and counted_status(old.obj) == counted_status(obj):
            cp = old
            cp.obj = obj  # the same spec (but its node), labels, owners and resize state: the parsed view stays
        else:
            try:
                cp = CachedPod(obj, pod_info(obj))
            except (ValidationErrors, ValueError) as e:
                log.warning("pod_not_schedulable", pod=key, error=str(e))
                return
            if old is not None and key in self.table.bound and key not in self.assumed:
                self.table.unbind(key)  # counted again below with its new labels (spread, anti-affinity)
        self.pods[key] = cp
        node = cp.node
        if node is None and key in self.assumed and not cp.deleting:
            return  # its binding is on its way
        if node is not None and not cp.terminal:
            self.pending.pop(key, None)
            self._count(cp, node)
            if old is not None and old is not cp and old.info.requests != cp.info.requests:
                self.on_change()  # a resize moved what the pod holds: pending pods may fit now
            return
        self._uncount(key)
        if node is None and not cp.terminal and not cp.deleting and \
                (spec.get("schedulerName") or DEFAULT_SCHEDULER) == self.scheduler_name:
            changed = old is None or old is not cp or key not in self.pending
            self.pending[key] = cp
            if changed:
                self.on_pending(cp)
        else:
            if self.pending.pop(key, None) is not None:
                self.on_gone(key)
            if cp.terminal and node is not None:
                self.on_change()

    def _count(self, cp: CachedPod, node: str) -> None:
        key = cp.key
        bound = self.table.bound.get(key)
        self.assumed.pop(key, None)
        self.unreserve(key)
        if bound is not None and bound.node == node:
            return
        if bound is not None:
            self.table.unbind(key)
        for orphans in self.orphans.values():
            orphans.pop(key, None)
        if node in self.table.index:
            self.table.bind(cp.info, node)
            self.on_assigned()
        else:
            self.orphans.setdefault(node, {})[key] = cp

    def _uncount(self, key: str) -> bool:
        freed = False
        if key in self.table.bound and key not in self.assumed:
            self.table.unbind(key)
            freed = True
        for orphans in self.orphans.values():
            orphans.pop(key, None)
        return freed

    def _forget(self, key: str) -> None:
        self.assumed.pop(key, None)
        freed = self._uncount(key)
        if key in self.table.bound:
            self.table.unbind(key)
            freed = True
        self.unreserve(key)
        self.pods.pop(key, None)
        if self.pending.pop(key, None) is not None:
            self.on_gone(key)
        if freed:
            self.on_change()

    # ---- the scheduler's own marks ---------------------------------------------------------------
    def assume(self, cp: CachedPod, node: str) -> None:
        """Count `cp` on `node` now; the binding is on its way."""
        self.unreserve(cp.key)
        self.pending.pop(cp.key, None)
        if cp.key not in self.table.bound:
            self.table.bind(cp.info, node)
        self.assumed[cp.key] = node
        self.on_assigned()

    def forget_assumed(self, key: str) -> None:
        """The binding failed: the room is free again; the pod is pending again if it still is."""
        if self.assumed.pop(key, None) is None:
            return
        if key in self.table.bound:
            self.table.unbind(key)
        cp = self.pods.get(key)
        if cp is not None and cp.node is None and not cp.deleting and not cp.terminal:
            self.pending[key] = cp
        self.on_change()

    def reserve(self, cp: CachedPod, node: str) -> None:
        """A nomination: the preemptor's requests held on `node` while its victims go."""
        self.unreserve(cp.key)
        if node not in self.table.index:
            return
        info = PodInfo(key=NOMINATED + cp.key, requests=cp.info.requests, priority=cp.info.priority,
                       nonzero_cpu=cp.info.nonzero_cpu, nonzero_memory=cp.info.nonzero_memory,
                       critical=cp.info.critical)
        self.table.bind(info, node)
        self.nominations[cp.key] = node

    def unreserve(self, key: str) -> None:
        if self.nominations.pop(key, None) is not None and NOMINATED + key in self.table.bound:
            self.table.unbind(NOMINATED + key)

    def victims_pending(self, node: str, priority: int) -> bool:
        """Pods of lower priority on `node` already being deleted (a preemption under way)."""
        i = self.table.index.get(node)
        if i is None:
            return False
        for key, bp in self.table.pods[i].items():
            cp = self.pods.get(key)
            if cp is not None and cp.deleting and bp.priority < priority:
                return True
        return False
