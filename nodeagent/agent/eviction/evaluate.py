"""Eviction decisions: thresholds met, grace periods, node conditions, what to reclaim (pure).

Mirrors the decision half of the kubelet's eviction manager (pkg/kubelet/eviction/helpers.go and
managerImpl.synchronize / Admit in eviction_manager.go), with time passed in as plain seconds so
every rule is table-tested with a fake clock. `step` is one synchronize pass minus the I/O.

Kubelet facts kept here:
- a threshold is "hard" when its grace period is 0 (isHardEvictionThreshold), whichever map it
  came from;
- once a threshold has been acted on (met past its grace period), it stays met until available
  exceeds value + minReclaim (thresholdsMet with enforceMinReclaim over the previous set);
- a threshold's first-observed time is kept while it stays met; it acts once met for its grace;
- node conditions come from thresholds met ignoring grace, and stay true for the pressure
  transition period after the last time they were observed;
- only thresholds whose stats are newer than the previous pass act (thresholdsUpdatedStats);
- memory thresholds are reclaimed first (byEvictionPriority), one resource per pass.
Deliberate differences, each documented where it happens:
- with a transition period of 0 a condition is true while observed (the kubelet's `now-at <
  period` makes it never true);
- where the kubelet's order is Go map order (random), ours is fixed: conditions print in
  Memory, Disk, PID order, and the threshold to reclaim is chosen by a stated tie-break
  (`_reclaim_key`);
- the Decision also says how much to reclaim, since nodeagent evicts as many pods as that needs
  in one pass (the kubelet evicts one pod per pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from nodeagent.agent.config.thresholds import (
    ALLOCATABLE_MEMORY_AVAILABLE,
    IMAGEFS_AVAILABLE,
    IMAGEFS_INODES_FREE,
    MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    NODEFS_INODES_FREE,
    OP_LESS_THAN,
    PID_AVAILABLE,
    SIGNAL_RESOURCE,
    Threshold,
)
from nodeagent.agent.eviction.observations import Observation, PodFacts
from nodeagent.core import wellknown
from nodeagent.core.model import Pod
from nodeagent.core.qos import BEST_EFFORT
from nodeagent.core.tolerations import Taint, tolerated_by_any
from nodeagent.core.wellknown import TAINT_MEMORY_PRESSURE

MEMORY_PRESSURE = wellknown.NODE_MEMORY_PRESSURE
DISK_PRESSURE = wellknown.NODE_DISK_PRESSURE
PID_PRESSURE = wellknown.NODE_PID_PRESSURE
CONDITION_ORDER = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)

SIGNAL_CONDITION: dict[str, str] = {
    MEMORY_AVAILABLE: MEMORY_PRESSURE,
    ALLOCATABLE_MEMORY_AVAILABLE: MEMORY_PRESSURE,
    NODEFS_AVAILABLE: DISK_PRESSURE,
    NODEFS_INODES_FREE: DISK_PRESSURE,
    IMAGEFS_AVAILABLE: DISK_PRESSURE,
    IMAGEFS_INODES_FREE: DISK_PRESSURE,
    "containerfs.available": DISK_PRESSURE,
    "containerfs.inodesFree": DISK_PRESSURE,
    PID_AVAILABLE: PID_PRESSURE,
}
# Fixed order among non-memory signals (the kubelet leaves it to map iteration).
SIGNAL_ORDER = (
    MEMORY_AVAILABLE,
    ALLOCATABLE_MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    NODEFS_INODES_FREE,
    IMAGEFS_AVAILABLE,
    IMAGEFS_INODES_FREE,
    PID_AVAILABLE,
)

EVICTION_REASON = "Evicted"  # the kubelet's eviction.Reason, for pod status and admission


def is_hard(threshold: Threshold) -> bool:
    """The kubelet's rule: grace period 0 means evict now, with the immediate grace period."""
    return threshold.grace_period == 0


def threshold_value(threshold: Threshold, observation: Observation) -> int:
    """The threshold in the signal's unit (percentages are of the observed capacity)."""
    return threshold.value_for(observation.capacity)


def _is_met(threshold: Threshold, observation: Observation, enforce_min_reclaim: bool) -> bool:
    value = threshold_value(threshold, observation)
    if enforce_min_reclaim:
        value += threshold.min_reclaim_for(observation.capacity)
    if threshold.operator == OP_LESS_THAN:
        return value > observation.available
    return False


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Mapping[str, Observation], enforce_min_reclaim: bool
) -> list[Threshold]:
    """Thresholds whose signal is below the value (or value + minReclaim when enforcing);
    a signal with no observation never meets its thresholds."""
    out = []
    for t in thresholds:
        observed = observations.get(t.signal)
        if observed is not None and _is_met(t, observed, enforce_min_reclaim):
            out.append(t)
    return out


def newly_met(thresholds: Iterable[Threshold], observations: Mapping[str, Observation],
              already_met: Sequence[Threshold]) -> list[Threshold]:
    """Thresholds met now (their signals observed) that the last pass did not find met: a look
    between passes that finds one calls for a pass at once; one already met waits for the poll."""
    return [t for t in thresholds_met(thresholds, observations, enforce_min_reclaim=False) if t not in already_met]


def merge_thresholds(first: Iterable[Threshold], second: Iterable[Threshold]) -> list[Threshold]:
    out = list(first)
    out += [t for t in second if t not in out]
    return out


def thresholds_first_observed_at(
    thresholds: Iterable[Threshold], last: Mapping[Threshold, float], now: float
) -> dict[Threshold, float]:
    """Keep the first-observed time of thresholds still met; new ones start now; others drop."""
    return {t: last.get(t, now) for t in thresholds}


def thresholds_met_grace_period(first_observed: Mapping[Threshold, float], now: float) -> list[Threshold]:
    """Thresholds met continuously for at least their grace period (hard ones at once)."""
    return [t for t, at in first_observed.items() if now - at >= t.grace_period]


def thresholds_updated_stats(
    thresholds: Iterable[Threshold], observations: Mapping[str, Observation], last: Mapping[str, Observation]
) -> list[Threshold]:
    """Thresholds whose observation is newer than last pass's (time 0 = unknown = fresh), so
    stale stats do not evict a second round of pods for the same shortage."""
    out = []
    for t in thresholds:
        observed = observations.get(t.signal)
        if observed is None:
            continue
        previous = last.get(t.signal)
        if previous is None or observed.time == 0 or observed.time > previous.time:
            out.append(t)
    return out


def _ordered_conditions(conditions: Iterable[str]) -> tuple[str, ...]:
    present = set(conditions)
    return tuple(c for c in CONDITION_ORDER if c in present)


def node_conditions(thresholds: Iterable[Threshold]) -> tuple[str, ...]:
    """Conditions the given thresholds imply (MemoryPressure, DiskPressure, PIDPressure)."""
    return _ordered_conditions(SIGNAL_CONDITION[t.signal] for t in thresholds if t.signal in SIGNAL_CONDITION)


def node_conditions_last_observed_at(
    conditions: Iterable[str], last: Mapping[str, float], now: float
) -> dict[str, float]:
    """Conditions observed now get `now`; the others keep their last time."""
    out = dict(last)
    out.update(dict.fromkeys(conditions, now))
    return out


def conditions_observed_since(
    last_observed: Mapping[str, float], transition_period: float, now: float
) -> tuple[str, ...]:
    """Conditions observed within the transition period: a condition stays true until none of
    its thresholds has been met for that long. Observed right now counts even with period 0."""
    return _ordered_conditions(c for c, at in last_observed.items() if at == now or now - at < transition_period)


def reclaim_amount(threshold: Threshold, observation: Observation) -> int:
    """How much to free so the threshold is resolved: value + minReclaim - available (>= 0),
    in the signal's unit (bytes, inodes or pids)."""
    needed = threshold_value(threshold, observation) + threshold.min_reclaim_for(observation.capacity)
    return max(0, needed - observation.available)


IMAGE_RECLAIM_ALL = 1 << 62  # bytes: every unused image (an inode shortfall has no byte figure)


def image_reclaim_bytes(threshold: Threshold, observation: Observation | None, *,
                        dedicated_imagefs: bool) -> int:
    """Bytes of unused images to delete before evicting for `threshold` (0: none), after the
    dead containers' and pods' data are gone. The kubelet's node reclaim funcs
    (buildSignalToNodeReclaimFuncs): with an imagefs of its own, imagefs.* pressure deletes
    unused images and nodefs.* pressure does not (images are not there); on a shared disk,
    every disk signal does. The kubelet then deletes every unused image; we delete the least
    recently used until the shortfall (value + minReclaim - available) is freed, keeping the
    rest warm, and every unused one for an inode shortfall."""
    if threshold.signal in (IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE):
        applies = True
    elif threshold.signal in (NODEFS_AVAILABLE, NODEFS_INODES_FREE):
        applies = not dedicated_imagefs
    else:
        applies = False
    if not applies or observation is None:
        return 0
    if threshold.resource == "inodes":
        return IMAGE_RECLAIM_ALL
    return reclaim_amount(threshold, observation)


def _reclaim_key(threshold: Threshold, observation: Observation) -> tuple[int, int, int, int]:
    """byEvictionPriority made deterministic. Memory signals first (as in the kubelet); then hard
    before soft (its victims get the immediate grace period); then, among memory signals, the
    larger shortfall (both are bytes, and evicting for the larger one covers the other); among
    the others, the fixed signal order, then the larger shortfall."""
    hard = 0 if is_hard(threshold) else 1
    order = SIGNAL_ORDER.index(threshold.signal) if threshold.signal in SIGNAL_ORDER else len(SIGNAL_ORDER)
    amount = reclaim_amount(threshold, observation)
    if threshold.resource == "memory":
        return (0, hard, -amount, order)
    return (1, hard, order, -amount)


def sort_by_eviction_priority(
    thresholds: Iterable[Threshold], observations: Mapping[str, Observation]
) -> list[Threshold]:
    """Met thresholds in reclaim order; thresholds with no observation go last."""
    items = list(thresholds)
    observed = [t for t in items if t.signal in observations]
    missing = [t for t in items if t.signal not in observations]
    return sorted(observed, key=lambda t: _reclaim_key(t, observations[t.signal])) + missing


K = TypeVar("K")
V = TypeVar("V")


def _frozen(mapping: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy, so a state record cannot be changed behind the manager's back."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class EvictionState:
    """What one pass remembers for the next (the manager's fields, immutable)."""

    thresholds_first_observed_at: Mapping[Threshold, float] = field(default_factory=lambda: _frozen({}))
    node_conditions_last_observed_at: Mapping[str, float] = field(default_factory=lambda: _frozen({}))
    thresholds_met: tuple[Threshold, ...] = ()
    node_conditions: tuple[str, ...] = ()
    last_observations: Mapping[str, Observation] = field(default_factory=lambda: _frozen({}))


@dataclass(frozen=True)
class Decision:
    """The outcome of one pass: conditions to report and what, if anything, to reclaim now."""

    conditions: tuple[str, ...]
    thresholds: tuple[Threshold, ...] = ()  # met, past grace, fresh stats; in reclaim order
    threshold: Threshold | None = None  # the one to reclaim for (first of `thresholds`)
    observation: Observation | None = None  # its signal's observation
    amount: int = 0  # to free, in the resource's unit

    @property
    def hard(self) -> tuple[Threshold, ...]:
        return tuple(t for t in self.thresholds if is_hard(t))

    @property
    def soft(self) -> tuple[Threshold, ...]:
        return tuple(t for t in self.thresholds if not is_hard(t))

    @property
    def signal(self) -> str | None:
        """The starved signal, e.g. memory.available."""
        return self.threshold.signal if self.threshold else None

    @property
    def resource(self) -> str | None:
        """The resource to reclaim: memory, ephemeral-storage, inodes or pids."""
        return SIGNAL_RESOURCE.get(self.threshold.signal) if self.threshold else None

    @property
    def evict(self) -> bool:
        return self.threshold is not None and self.amount > 0


def step(
    state: EvictionState,
    thresholds: Sequence[Threshold],
    observations: Mapping[str, Observation],
    now: float,
    *,
    pressure_transition_period: float = 300.0,
) -> tuple[EvictionState, Decision]:
    """One synchronize pass: the kubelet's sequence of helpers, in its order."""
    if pressure_transition_period < 0:
        raise ValueError(f"pressure_transition_period: must not be negative, got {pressure_transition_period}")
    met = thresholds_met(thresholds, observations, enforce_min_reclaim=False)
    if state.thresholds_met:
        met = merge_thresholds(met, thresholds_met(state.thresholds_met, observations, enforce_min_reclaim=True))
    first_observed = thresholds_first_observed_at(met, state.thresholds_first_observed_at, now)
    last_seen = node_conditions_last_observed_at(node_conditions(met), state.node_conditions_last_observed_at, now)
    conditions = conditions_observed_since(last_seen, pressure_transition_period, now)
    acting = thresholds_met_grace_period(first_observed, now)
    new_state = EvictionState(
        thresholds_first_observed_at=_frozen(first_observed),
        node_conditions_last_observed_at=_frozen(last_seen),
        thresholds_met=tuple(acting),
        node_conditions=conditions,
        last_observations=_frozen(observations),
    )
    updated = thresholds_updated_stats(acting, observations, state.last_observations)
    fresh = [t for t in sort_by_eviction_priority(updated, observations) if t.signal in SIGNAL_RESOURCE]
    if not fresh:
        return new_state, Decision(conditions=conditions)
    chosen = fresh[0]
    observed = observations[chosen.signal]
    decision = Decision(
        conditions=conditions,
        thresholds=tuple(fresh),
        threshold=chosen,
        observation=observed,
        amount=reclaim_amount(chosen, observed),
    )
    return new_state, decision


_MEMORY_PRESSURE_TAINT = Taint(TAINT_MEMORY_PRESSURE)  # NoSchedule, no value


def _tolerates_memory_pressure(pod: Pod) -> bool:
    """TolerationsTolerateTaint for node.kubernetes.io/memory-pressure:NoSchedule (no value)."""
    return tolerated_by_any(pod.spec.tolerations, _MEMORY_PRESSURE_TAINT)


def admit_under_pressure(pod: PodFacts, conditions: Iterable[str]) -> tuple[bool, str | None, str]:
    """The eviction manager's admission handler: (admit, reason, message), from the pod's
    admission facts (its plan's criticality and QoS class).

    No condition: admit. Critical pods: always admit. Only MemoryPressure: admit all but
    BestEffort pods, and BestEffort pods that tolerate the memory-pressure taint. Any other
    condition (DiskPressure, PIDPressure): reject every non-critical pod. The rejection reads
    exactly like the kubelet's: reason "Evicted", message "The node had condition: [X Y]. "
    (Go's %v of the condition list, trailing space included).
    """
    present = _ordered_conditions(conditions)
    if not present or pod.critical:
        return True, None, ""
    if present == (MEMORY_PRESSURE,) and (pod.qos != BEST_EFFORT or _tolerates_memory_pressure(pod.pod)):
        return True, None, ""
    return False, EVICTION_REASON, f"The node had condition: [{' '.join(present)}]. "
