"""The scheduler's node table: one row per node, stored as numpy columns (struct-of-arrays).

Why arrays: filter and score run for every pending pod over every node. As numpy columns they
are a few dozen vector operations per pod instead of a Python loop (5000 nodes: ~700 pods/s as a
loop). Binding a pod changes one column of each array (O(1) in the node count); adding a node
appends a row (amortised O(1)); removing one moves the last row into its place.

Units are integers: cpu in millicores, everything else in whole units (bytes, pods, devices).
Node conditions are folded into taints as the node lifecycle controller does (TaintNodesByCondition):
NotReady -> node.kubernetes.io/not-ready:NoSchedule, cordoned -> node.kubernetes.io/unschedulable,
MemoryPressure/DiskPressure/PIDPressure -> node.kubernetes.io/<x>-pressure:NoSchedule.
Per priority level the table also keeps the summed requests of the (non-critical) pods at that
level, so preemption can ask "does it fit once everything below priority P is gone" for all nodes
at once.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from nodeagent.core import wellknown
from nodeagent.core.errors import FieldError
from nodeagent.core.quantity import Quantity
from nodeagent.core.tolerations import NO_EXECUTE as NO_EXECUTE
from nodeagent.core.tolerations import NO_SCHEDULE as NO_SCHEDULE
from nodeagent.core.tolerations import Taint as Taint

NOMINATED = "\x00nominated/"  # the key prefix of a nominated pod's reservation in the table

CPU, MEMORY, EPHEMERAL_STORAGE, PODS = "cpu", "memory", "ephemeral-storage", "pods"
BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
CPU_COL, MEM_COL, EPH_COL, PODS_COL = 0, 1, 2, 3
# Rows of NodeTable.scoring (float64 copies the score functions read without conversion).
S_ALLOC_CPU, S_ALLOC_MEM, S_USED_CPU, S_USED_MEM, S_NZ_CPU, S_NZ_MEM = range(6)

NOT_READY = Taint(wellknown.TAINT_NOT_READY)
UNSCHEDULABLE = Taint(wellknown.TAINT_UNSCHEDULABLE)
MEMORY_PRESSURE = Taint(wellknown.TAINT_MEMORY_PRESSURE)
DISK_PRESSURE = Taint(wellknown.TAINT_DISK_PRESSURE)
PID_PRESSURE = Taint(wellknown.TAINT_PID_PRESSURE)


def amount(resource: str, value: Quantity | int) -> int:
    """Table units: a Quantity becomes millicores for cpu and whole units otherwise (rounded up);
    an int is taken as already in table units."""
    if isinstance(value, Quantity):
        return value.milli_value() if resource == CPU else value.value()
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(resource, f"must be a quantity or an integer, not {value!r}")
    return value


@dataclass(frozen=True)
class NodeSpec:
    """What the table needs to know about a node (fed from the agents' node status reports)."""

    name: str
    allocatable: Mapping[str, Quantity | int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()
    unschedulable: bool = False
    ready: bool = True
    memory_pressure: bool = False
    disk_pressure: bool = False
    pid_pressure: bool = False

    def effective_taints(self) -> tuple[Taint, ...]:
        """Condition taints first (in this fixed order), then the node's own, without repeats."""
        derived = [t for on, t in ((not self.ready, NOT_READY), (self.unschedulable, UNSCHEDULABLE),
                                   (self.memory_pressure, MEMORY_PRESSURE),
                                   (self.disk_pressure, DISK_PRESSURE),
                                   (self.pid_pressure, PID_PRESSURE)) if on]
        return tuple(dict.fromkeys([*derived, *self.taints]))


@dataclass(slots=True, eq=False)
class BoundPod:
    """A pod the table counts against a node. `seq` is the bind order, our pod start time."""

    key: str
    node: str
    priority: int
    critical: bool
    requests: dict[int, int]  # column -> amount (positive), pods column included
    cols: np.ndarray
    vals: np.ndarray
    score_delta: np.ndarray  # added to scoring[S_USED_CPU:, i]: used cpu/mem, non-zero cpu/mem
    seq: int
    label_set: int = -1  # row of NodeTable.set_counts (namespace + labels), -1: not counted
    anti_affinity: tuple[Hashable, ...] = ()  # its required pod anti-affinity terms (podspread)

    def __repr__(self) -> str:
        return f"BoundPod({self.key!r}, node={self.node!r}, priority={self.priority}, seq={self.seq})"


class Bindable(Protocol):
    """What the table needs of a pod to count it (framework.PodInfo is one)."""

    key: str
    priority: int
    critical: bool
    score_delta: np.ndarray

    def vector(self, table: NodeTable) -> tuple[np.ndarray, np.ndarray]: ...


LabelSetKey = tuple[str, tuple[tuple[str, str], ...]]


def importance(bp: BoundPod) -> tuple[int, int]:
    """Sort key, most important first: higher priority, then earlier start (kube's
    MoreImportantPod)."""
    return (-bp.priority, bp.seq)


class NodeTable:
    """Nodes as rows of numpy arrays; see the module docstring. Not thread-safe."""

    def __init__(self, capacity: int = 64) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self._res_index = {r: i for i, r in enumerate(self.resources)}
        self._cap = max(1, capacity)
        self._rcap = 8
        self.n = 0
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.specs: list[NodeSpec] = []
        self.alloc = np.zeros((self._rcap, self._cap), np.int64)
        self.free = np.zeros((self._rcap, self._cap), np.int64)  # allocatable minus requested
        self.scoring = np.zeros((6, self._cap), np.float64)
        self.unschedulable = np.zeros(self._cap, bool)
        self.taint_ids = np.full((2, self._cap), -1, np.int32)  # -1 pads; ids index self.taints
        self.taints: list[Taint] = []
        self._taint_index: dict[Taint, int] = {}
        self.labels: dict[str, np.ndarray] = {}  # key -> value id per node, -1 when absent
        self.label_values: dict[str, dict[str, int]] = {}
        self.pods: list[dict[str, BoundPod]] = []
        self.order: list[list[BoundPod]] = []  # per node, most important first (preemption)
        self.bound: dict[str, BoundPod] = {}
        self.levels: dict[int, np.ndarray] = {}  # priority -> summed requests at that priority
        self.zero_cpu_or_mem = 0  # nodes with no cpu or no memory (the score takes a slow path)
        # Bound pods by (namespace, labels): per label set, how many such pods each node holds.
        # Replicas share their labels, so a selector is matched against a few sets, not every pod
        # (topology spread, pod anti-affinity).
        self.label_sets: dict[LabelSetKey, int] = {}
        self.set_labels: list[tuple[str, dict[str, str]]] = []
        self.set_counts = np.zeros((8, self._cap), np.int32)
        # Required pod anti-affinity terms of bound pods (hashable, podspread.PodTerm): per term,
        # how many holders each node has. Replicas share their terms: a few arrays, not a pod loop.
        self.anti_counts: dict[Hashable, np.ndarray] = {}
        self._anti_total: dict[Hashable, int] = {}
        self.generation = 0  # bumped whenever taints, labels, cordons or the node set change
        self._seq = 0
        self._scratch: dict[tuple[str, int, np.dtype], np.ndarray] = {}

    # ---- resources ---------------------------------------------------------------------------
    def resource_col(self, name: str) -> int:
        """The column of `name`, registering it (zero on every node) the first time."""
        col = self._res_index.get(name)
        if col is None:
            col = len(self.resources)
            if col == self._rcap:
                self._rcap *= 2
                self.alloc = _grow(self.alloc, self._rcap, axis=0)
                self.free = _grow(self.free, self._rcap, axis=0)
                self.levels = {p: _grow(m, self._rcap, axis=0) for p, m in self.levels.items()}
            self.resources.append(name)
            self._res_index[name] = col
        return col

    # ---- nodes -------------------------------------------------------------------------------
    def upsert(self, spec: NodeSpec) -> int:
        """Add a node or replace its description (its bound pods stay); returns its row."""
        if not spec.name:
            raise FieldError("metadata.name", "Required value")
        amounts = [(k, amount(k, v)) for k, v in spec.allocatable.items()]
        for name, value in amounts:
            if value < 0:
                raise FieldError(f"status.allocatable.{name}",
                                 f"Invalid value: {value}: must be greater than or equal to 0")
        taints = spec.effective_taints()
        cols = [(self.resource_col(name), value) for name, value in amounts]
        i = self.index.get(spec.name)
        if i is None:
            i = self.n
            if i == self._cap:
                self._grow_nodes(self._cap * 2)
            self.n += 1
            self.names.append(spec.name)
            self.index[spec.name] = i
            self.specs.append(spec)
            self.pods.append({})
            self.order.append([])
        else:
            self.zero_cpu_or_mem -= int(self.alloc[CPU_COL, i] <= 0 or self.alloc[MEM_COL, i] <= 0)
            self.specs[i] = spec
        used = self.alloc[:, i] - self.free[:, i]  # zero for a new row
        alloc = np.zeros(self._rcap, np.int64)
        for col, value in cols:
            alloc[col] = value
        self.alloc[:, i] = alloc
        self.free[:, i] = alloc - used
        self.scoring[S_ALLOC_CPU, i] = alloc[CPU_COL]
        self.scoring[S_ALLOC_MEM, i] = alloc[MEM_COL]
        self.zero_cpu_or_mem += int(alloc[CPU_COL] <= 0 or alloc[MEM_COL] <= 0)
        self.unschedulable[i] = spec.unschedulable
        self._set_taints(i, taints)
        self._set_labels(i, spec.labels)
        self.generation += 1
        return i

    def remove(self, name: str) -> list[BoundPod]:
        """Drop a node; returns the pods that were bound to it (no longer counted anywhere)."""
        i = self.index.pop(name)
        orphans = list(self.pods[i].values())
        for bp in orphans:
            self._account(bp, i, -1)
            del self.bound[bp.key]
        self.zero_cpu_or_mem -= int(self.alloc[CPU_COL, i] <= 0 or self.alloc[MEM_COL, i] <= 0)
        last = self.n - 1
        matrices: list[np.ndarray] = [self.alloc, self.free, self.scoring, self.set_counts,
                                      *self.levels.values()]
        if i != last:  # move the last row into the hole
            for m in [*matrices, self.taint_ids]:
                m[:, i] = m[:, last]
            self.unschedulable[i] = self.unschedulable[last]
            for arr in [*self.labels.values(), *self.anti_counts.values()]:
                arr[i] = arr[last]
            self.names[i], self.specs[i] = self.names[last], self.specs[last]
            self.pods[i], self.order[i] = self.pods[last], self.order[last]
            self.index[self.names[i]] = i
        for m in matrices:
            m[:, last] = 0
        self.taint_ids[:, last] = -1
        self.unschedulable[last] = False
        for arr in self.labels.values():
            arr[last] = -1
        for holders in self.anti_counts.values():
            holders[last] = 0
        self.names.pop()
        self.specs.pop()
        self.pods.pop()
        self.order.pop()
        self.n -= 1
        self.generation += 1
        return orphans

    def spec(self, name: str) -> NodeSpec:
        return self.specs[self.index[name]]

    def scratch(self, name: str, rows: int, dtype: type = np.int64) -> np.ndarray:
        """A reusable (rows, n) work array, contents undefined. Hot paths use these instead of
        big temporaries: freeing those lets malloc hand pages back to the kernel, and the next
        allocation faults them in again (a third of the preemption path's time)."""
        key = (name, rows, np.dtype(dtype))
        buf = self._scratch.get(key)
        if buf is None or buf.shape[1] != self._cap:
            buf = self._scratch[key] = np.empty((rows, self._cap), dtype)
        return buf[:, : self.n]

    # ---- pods --------------------------------------------------------------------------------
    def bind(self, pod: Bindable, node: str) -> BoundPod:
        """Count `pod` against `node` (O(1) in the node count). Fit is the caller's business:
        the table records what the store says is bound, even an overcommitted node."""
        if pod.key in self.bound:
            raise ValueError(f"pod {pod.key} is already bound to {self.bound[pod.key].node}")
        i = self.index[node]
        cols, vals = pod.vector(self)
        self._seq += 1
        bp = BoundPod(pod.key, node, pod.priority, pod.critical,
                      dict(zip(cols.tolist(), vals.tolist(), strict=False)), cols, vals,
                      pod.score_delta, self._seq)
        labels: Mapping[str, str] | None = getattr(pod, "labels", None)
        if labels is not None and not pod.key.startswith(NOMINATED):
            bp.label_set = self._label_set(str(getattr(pod, "namespace", "")), labels)
            bp.anti_affinity = tuple(getattr(pod, "anti_affinity", ()))
        self._account(bp, i, +1)
        self.pods[i][pod.key] = bp
        insort(self.order[i], bp, key=importance)
        self.bound[pod.key] = bp
        return bp

    def unbind(self, key: str) -> BoundPod:
        """Stop counting a pod (deleted, preempted, or moved); KeyError if it is not bound."""
        bp = self.bound.pop(key)
        i = self.index[bp.node]
        del self.pods[i][key]
        self.order[i].remove(bp)
        self._account(bp, i, -1)
        return bp

    def _label_set(self, namespace: str, labels: Mapping[str, str]) -> int:
        key = (namespace, tuple(sorted(labels.items())))
        sid = self.label_sets.get(key)
        if sid is None:
            sid = self.label_sets[key] = len(self.set_labels)
            self.set_labels.append((namespace, dict(labels)))
            if sid == self.set_counts.shape[0]:
                self.set_counts = _grow(self.set_counts, 2 * sid, axis=0)
        return sid

    def _account(self, bp: BoundPod, i: int, sign: int) -> None:
        if bp.label_set >= 0:
            self.set_counts[bp.label_set, i] += sign
        for term in bp.anti_affinity:
            holders = self.anti_counts.get(term)
            if holders is None:
                holders = self.anti_counts[term] = np.zeros(self._cap, np.int32)
            holders[i] += sign
            left = self._anti_total[term] = self._anti_total.get(term, 0) + sign
            if left <= 0:
                del self.anti_counts[term], self._anti_total[term]
        free = self.free  # scalar updates: cheaper than fancy indexing for a handful of columns
        for col, value in bp.requests.items():
            free[col, i] -= sign * value
        if sign > 0:
            self.scoring[S_USED_CPU:, i] += bp.score_delta
        else:
            self.scoring[S_USED_CPU:, i] -= bp.score_delta
        if not bp.critical:
            level = self.levels.get(bp.priority)
            if level is None:
                level = self.levels[bp.priority] = np.zeros((self._rcap, self._cap), np.int64)
            for col, value in bp.requests.items():
                level[col, i] += sign * value

    # ---- internals ---------------------------------------------------------------------------
    def _grow_nodes(self, cap: int) -> None:
        self._cap = cap
        self.alloc = _grow(self.alloc, cap)
        self.free = _grow(self.free, cap)
        self.scoring = _grow(self.scoring, cap)
        self.set_counts = _grow(self.set_counts, cap)
        self.anti_counts = {k: _grow(a, cap, axis=0) for k, a in self.anti_counts.items()}
        self.unschedulable = _grow(self.unschedulable, cap, axis=0)
        self.taint_ids = _grow(self.taint_ids, cap, fill=-1)
        self.labels = {k: _grow(a, cap, axis=0, fill=-1) for k, a in self.labels.items()}
        self.levels = {p: _grow(m, cap) for p, m in self.levels.items()}

    def _set_taints(self, i: int, taints: tuple[Taint, ...]) -> None:
        if len(taints) > self.taint_ids.shape[0]:
            rows = max(len(taints), 2 * self.taint_ids.shape[0])
            self.taint_ids = _grow(self.taint_ids, rows, axis=0, fill=-1)
        self.taint_ids[:, i] = -1
        for slot, taint in enumerate(taints):
            tid = self._taint_index.get(taint)
            if tid is None:
                tid = self._taint_index[taint] = len(self.taints)
                self.taints.append(taint)
            self.taint_ids[slot, i] = tid

    def _set_labels(self, i: int, labels: Mapping[str, str]) -> None:
        for arr in self.labels.values():
            arr[i] = -1
        for key, value in labels.items():
            if key not in self.labels:
                self.labels[key] = np.full(self._cap, -1, np.int32)
                self.label_values[key] = {}
            ids = self.label_values[key]
            vid = ids.get(value)
            if vid is None:
                vid = ids[value] = len(ids)
            self.labels[key][i] = vid


def _grow(arr: np.ndarray, size: int, axis: int = -1, fill: int = 0) -> np.ndarray:
    """A copy of `arr` with `axis` extended to `size`, new cells set to `fill`."""
    shape = list(arr.shape)
    shape[axis] = size
    out = np.full(shape, fill, arr.dtype)
    index = [slice(None)] * arr.ndim
    index[axis] = slice(0, arr.shape[axis])
    out[tuple(index)] = arr
    return out
