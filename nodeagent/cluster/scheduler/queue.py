"""The scheduling queue: highest priority first, then first come first served; failed pods back off.

Like kube-scheduler's PriorityQueue (activeQ ordered by PrioritySort, plus a backoffQ): a pod
that could not be scheduled is requeued with a backoff of `initial_backoff` * 2^(attempts-1)
seconds, capped at `max_backoff` (podInitialBackoffSeconds=1, podMaxBackoffSeconds=10), counted
from the moment it was requeued. A requeued pod takes a new arrival stamp, so it queues behind
pods of its priority that arrived while it was being tried (kube sets the timestamp again too).
A pod that fit nowhere (`requeue(key, unschedulable=True)`) waits in the unschedulable pool
instead, as kube's unschedulablePods: it is not tried again until a cluster event
(`move_all_to_active`: it goes to the backoff queue, or straight to active when its backoff has
ended) or until it has waited `unschedulable_timeout` (kube's podMaxInUnschedulablePodsDuration,
5 min). Retrying such pods at the end of every backoff cost the control plane's API server most of
its CPU with thousands of pending pods and no room (bench/README.md, "The API server with
thousands of pending pods").
Time comes from an injected clock; `pop` never sleeps: callers wait until `next_ready_at()`.
Removal is lazy (heap entries are checked against the pod's current state when they surface).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Generic, TypeVar

from nodeagent.core.clock import Clock

T = TypeVar("T")

DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 10.0
DEFAULT_UNSCHEDULABLE_TIMEOUT = 300.0  # kube-scheduler's podMaxInUnschedulablePodsDuration

ACTIVE, BACKOFF, IN_FLIGHT, UNSCHEDULABLE = "active", "backoff", "in-flight", "unschedulable"


@dataclass(eq=False)
class QueuedPod(Generic[T]):
    key: str
    item: T
    priority: int
    attempts: int = 0  # scheduling attempts so far (incremented by pop)
    seq: int = 0  # arrival stamp of the current heap entry
    ready_at: float = 0.0  # end of the current backoff
    state: str = ACTIVE


class SchedulingQueue(Generic[T]):
    def __init__(self, clock: Clock, initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
                 max_backoff: float = DEFAULT_MAX_BACKOFF,
                 unschedulable_timeout: float = DEFAULT_UNSCHEDULABLE_TIMEOUT) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("backoff: need 0 < initial_backoff <= max_backoff")
        if unschedulable_timeout <= 0:
            raise ValueError("unschedulable_timeout: must be > 0")
        self._clock = clock
        self._initial, self._max = initial_backoff, max_backoff
        self._unschedulable_timeout = unschedulable_timeout
        self._pods: dict[str, QueuedPod[T]] = {}
        self._active: list[tuple[int, int, str]] = []  # (-priority, seq, key)
        self._backoff: list[tuple[float, int, str]] = []  # (ready_at, seq, key)
        self._unschedulable: list[tuple[float, int, str]] = []  # (flushed_at, seq, key)
        self._seq = itertools.count()

    # ---- in ---------------------------------------------------------------------------------
    def add(self, key: str, item: T, priority: int) -> None:
        """Queue a new pod, or update a queued one (a changed pod is worth trying now: kube
        moves an updated pod out of backoff too). A pod being scheduled (popped) is updated in
        place and keeps its turn."""
        qp = self._pods.get(key)
        if qp is None:
            qp = self._pods[key] = QueuedPod(key, item, priority)
        else:
            qp.item, qp.priority = item, priority
            if qp.state == IN_FLIGHT:
                return
        self._activate(qp)

    def requeue(self, key: str, *, unschedulable: bool = False) -> float:
        """A popped pod failed to schedule: back it off; returns when its backoff ends. An
        `unschedulable` pod (it fits nowhere) waits for a cluster event as well, or for the
        unschedulable timeout."""
        qp = self._pods[key]
        if qp.state != IN_FLIGHT:
            raise ValueError(f"pod {key} is not being scheduled")
        now = self._clock.now()
        qp.ready_at = now + self.backoff_duration(qp.attempts)
        if unschedulable:
            qp.state = UNSCHEDULABLE
            qp.seq = next(self._seq)
            heapq.heappush(self._unschedulable, (now + self._unschedulable_timeout, qp.seq, key))
        else:
            self._back_off(qp)
        return qp.ready_at

    def backoff_duration(self, attempts: int) -> float:
        """initial * 2^(attempts-1), capped (kube's calculateBackoffDuration)."""
        duration = self._initial
        for _ in range(1, attempts):
            duration *= 2
            if duration >= self._max:
                return self._max
        return min(duration, self._max)

    def move_all_to_active(self) -> None:
        """A cluster event (node added, pod deleted...) may have made room: every unschedulable
        pod goes to the backoff queue, where those whose backoff has ended are activated (kube's
        MoveAllToActiveOrBackoffQueue)."""
        pool, self._unschedulable = self._unschedulable, []
        for _, seq, key in pool:
            qp = self._pods.get(key)
            if qp is not None and qp.state == UNSCHEDULABLE and qp.seq == seq:
                self._back_off(qp)
        self._flush_backoff()

    # ---- out --------------------------------------------------------------------------------
    def pop(self) -> QueuedPod[T] | None:
        """The next pod to schedule (or None when no pod is ready); counts an attempt. The pod
        stays known to the queue until `done` (bound or given up) or `requeue` (failed)."""
        self._flush_backoff()
        qp = self._peek_active()
        if qp is None:
            return None
        heapq.heappop(self._active)
        qp.state = IN_FLIGHT
        qp.attempts += 1
        return qp

    def done(self, key: str) -> None:
        """Forget a pod (bound, or deleted); its attempts are reset."""
        self._pods.pop(key, None)

    delete = done

    # ---- inspection -------------------------------------------------------------------------
    def next_ready_at(self) -> float | None:
        """now() if a pod is ready, else when the earliest backoff ends, else None."""
        self._flush_backoff()
        if self._peek_active() is not None:
            return self._clock.now()
        return min((at for at in (self._first(self._backoff, BACKOFF), self._first(self._unschedulable, UNSCHEDULABLE))
                    if at is not None), default=None)

    def _first(self, heap: list[tuple[float, int, str]], state: str) -> float | None:
        """The time of the first valid entry of `heap`, dropping stale ones on the way."""
        while heap:
            at, seq, key = heap[0]
            qp = self._pods.get(key)
            if qp is not None and qp.state == state and qp.seq == seq:
                return at
            heapq.heappop(heap)
        return None

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def counts(self) -> dict[str, int]:
        out = {ACTIVE: 0, BACKOFF: 0, IN_FLIGHT: 0, UNSCHEDULABLE: 0}
        for qp in self._pods.values():
            out[qp.state] += 1
        return out

    # ---- internals --------------------------------------------------------------------------
    def _activate(self, qp: QueuedPod[T]) -> None:
        qp.state = ACTIVE
        qp.seq = next(self._seq)
        heapq.heappush(self._active, (-qp.priority, qp.seq, qp.key))

    def _back_off(self, qp: QueuedPod[T]) -> None:
        qp.state = BACKOFF
        qp.seq = next(self._seq)
        heapq.heappush(self._backoff, (qp.ready_at, qp.seq, qp.key))

    def _flush_backoff(self) -> None:
        now = self._clock.now()
        pool = self._unschedulable
        while pool and pool[0][0] <= now:  # waited the unschedulable timeout: back to the backoff queue
            _, seq, key = heapq.heappop(pool)
            qp = self._pods.get(key)
            if qp is not None and qp.state == UNSCHEDULABLE and qp.seq == seq:
                self._back_off(qp)
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, key = heapq.heappop(self._backoff)
            qp = self._pods.get(key)
            if qp is not None and qp.state == BACKOFF and qp.seq == seq:
                self._activate(qp)

    def _peek_active(self) -> QueuedPod[T] | None:
        """The valid entry on top of the active heap, dropping stale ones on the way."""
        while self._active:
            _, seq, key = self._active[0]
            qp = self._pods.get(key)
            if qp is not None and qp.state == ACTIVE and qp.seq == seq:
                return qp
            heapq.heappop(self._active)
        return None
