"""The eviction manager loop: observe -> step (pure) -> reclaim/evict -> report.

Differences from the kubelet, on purpose:
- it wakes on kernel notifications (`wake`) and on an adaptive poll, not only every 10 s;
- it evicts as many pods as the shortfall needs in one pass (estimating each victim's yield
  from its usage), waits for the kills to complete, and re-observes at once;
- hard evictions kill at once (grace 0): being late means losing the race to the OOM killer;
- under disk pressure it deletes unused images only until the shortfall is covered (the kubelet
  deletes every unused image), after the dead pods' data, and re-observes after each step.
As the kubelet, every pass first evicts (grace 0) the pods over a local-storage limit (an
emptyDir over its sizeLimit, the pod or a container over its ephemeral-storage limit:
local_storage.py), when given a `local_storage` hook, and then
returns: the threshold decisions wait for the next pass.

Progress, for the watchdog (daemonkit/progress.py): the loop completes a pass at least every
`interval + max(1, evictionMaxPodGracePeriod) + PASS_SLACK_S` seconds. Between passes it sleeps
at most `interval`; a pass may wait for its victims for their grace period, then for the kill
(bounded in the runtime), may walk pod directories for disk usage and delete unused images;
PASS_SLACK_S covers those.
A loop past that bound is wedged (`stalled()`), and the agent stops its watchdog pings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from nodeagent.agent.config.settings import Config
from nodeagent.agent.config.thresholds import Threshold
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.evaluate import (
    EVICTION_REASON,
    EvictionState,
    admit_under_pressure,
    image_reclaim_bytes,
    is_hard,
    newly_met,
    reclaim_amount,
    step,
    thresholds_met,
)
from nodeagent.agent.eviction.local_storage import Violation
from nodeagent.agent.eviction.notify.adaptive import MEMORY_SIGNALS, look_slices
from nodeagent.agent.eviction.observations import Observation, PodFacts, PodUsage
from nodeagent.agent.eviction.ranking import eviction_grace_period, eviction_message, rank_for_signal, select_victims
from nodeagent.core.clock import Clock
from nodeagent.core.model import Pod
from nodeagent.core.waits import wait_for
from nodeagent.daemonkit.progress import Heartbeat

log = structlog.get_logger(__name__)

DISK_RESOURCES = ("ephemeral-storage", "inodes")
PASS_SLACK_S = 60.0  # a pass's own work beyond its victims' grace period (see the module docstring)
# PassResult.signal of a local-storage eviction (the evictions counter is labelled per check, as
# the kubelet's: emptydirfs.limit, ephemeralpodfs.limit, ephemeralcontainerfs.limit)
LOCAL_STORAGE = "local-storage"
# the pods over a local-storage limit, each with the kubelet's signal and message (PodEvictionAccess)
LocalStorageCheck = Callable[[], Awaitable[Sequence[tuple[Pod, Violation]]]]


def pass_bound(interval: float, max_pod_grace_period: int) -> float:
    """Seconds within which the next pass must complete (see the module docstring)."""
    return interval + max(1, max_pod_grace_period) + PASS_SLACK_S


class PodsAccess(Protocol):
    """What the eviction manager needs from the pod manager."""

    def evictable_pods(self) -> Sequence[PodFacts]:
        """Pods that hold resources now (admitted, not terminal), with their admission facts."""
        ...

    async def usage(self, pods: Sequence[Pod], resource: str | None) -> dict[str, PodUsage]:
        """What each pod uses of `resource` (the others may read 0); None: everything."""
        ...

    def kill(self, pod: Pod) -> None:
        """SIGKILL the pod's processes at once (a hard eviction), before the pass's bookkeeping;
        evict() follows in the same pass."""
        ...

    async def evict(self, pod: Pod, grace_period: float, message: str) -> None:
        """Terminate the pod (status Failed/Evicted) and return once its processes are gone."""
        ...

    async def reclaim_node_garbage(self) -> int:
        """Delete dead containers' logs and terminated pods' data; bytes freed."""
        ...


class ImageReclaim(Protocol):
    """What the eviction manager needs from the images (ImageManager implements it)."""

    async def reclaim(self, bytes_needed: int) -> int:
        """Delete unused images, least recently used first, until `bytes_needed` are freed; bytes freed."""
        ...


@dataclass
class PassResult:
    """What one pass did (for logs, metrics and tests)."""

    conditions: tuple[str, ...]
    signal: str | None = None
    observed: Observation | None = None
    evicted: tuple[str, ...] = ()
    reclaimed_bytes: int = 0  # node garbage and images together
    reclaimed_image_bytes: int = 0
    previous_conditions: tuple[str, ...] = ()  # the conditions before the pass (logged once it is done)


class EvictionManager:
    def __init__(
        self,
        thresholds: Sequence[Threshold],
        observe: Callable[[], dict[str, Observation]],
        pods: PodsAccess,
        events: EventRecorder,
        clock: Clock,
        *,
        transition_period: float,
        max_pod_grace_period: int,
        interval: float,
        next_interval: Callable[[dict[str, Observation]], float] | None = None,
        images: ImageReclaim | None = None,
        dedicated_imagefs: Callable[[], bool] = lambda: False,
        local_storage: LocalStorageCheck | None = None,
        observe_memory: Callable[[], dict[str, Observation]] | None = None,
    ) -> None:
        """`images`: unused images are deleted under disk pressure before pods are evicted;
        `dedicated_imagefs`: imagefsPath is a filesystem of its own (then nodefs pressure
        leaves images alone: see evaluate.image_reclaim_bytes); `local_storage`: the pods over
        a local-storage limit, evicted first in every pass; `observe_memory`: the memory signals
        alone, looked at between passes while the poll sleeps near a memory line (`_sleep`)."""
        self.thresholds = list(thresholds)
        self.observe = observe
        self.pods = pods
        self.events = events
        self.clock = clock
        self.transition_period = transition_period
        self.max_pod_grace_period = max_pod_grace_period
        self.interval = interval
        self.next_interval = next_interval
        self.images = images
        self.dedicated_imagefs = dedicated_imagefs
        self.local_storage = local_storage
        self.observe_memory = observe_memory
        self.state = EvictionState()
        self.wake = asyncio.Event()
        self.last_observations: dict[str, Observation] = {}
        self.evictions_total: dict[str, int] = {}
        self.on_pass: list[Callable[[PassResult], None]] = []
        self._evicted: set[str] = set()  # uids already evicted: never evicted (or counted) twice
        self._woken: tuple[str, float] | None = None  # the first notifier's wake-up since the last pass
        self._pass_woken: tuple[str, float | None] = ("start", None)  # what started the current pass
        self.progress = Heartbeat(clock, "eviction loop", pass_bound(interval, max_pod_grace_period))

    # ---- what others ask ----
    @property
    def conditions(self) -> tuple[str, ...]:
        return self.state.node_conditions

    def admit(self, pod: PodFacts) -> tuple[str, str] | None:
        """Admission under pressure, from the pod's plan: (reason, message) to refuse, or None."""
        ok, reason, message = admit_under_pressure(pod, self.conditions)
        return None if ok else (reason or EVICTION_REASON, message)

    def stalled(self) -> list[str]:
        """Why the loop is not making progress (empty when it is); see the module docstring."""
        return self.progress.stale()

    def reconfigure(self, config: Config) -> None:
        """A reload: thresholds, periods and the interval swap live (see set_thresholds)."""
        self.interval = config.housekeeping_interval
        self.set_thresholds(config.thresholds, transition_period=config.eviction_pressure_transition_period,
                            max_pod_grace_period=config.eviction_max_pod_grace_period)

    def set_thresholds(self, thresholds: Sequence[Threshold], *, transition_period: float,
                       max_pod_grace_period: int) -> None:
        """Swap thresholds live; pods are untouched and the next pass, which this wakes, uses
        them (conditions and their timestamps carry over)."""
        self.thresholds = list(thresholds)
        self.transition_period = transition_period
        self.max_pod_grace_period = max_pod_grace_period
        self.progress.bound = pass_bound(self.interval, max_pod_grace_period)
        self.state = EvictionState(node_conditions_last_observed_at=self.state.node_conditions_last_observed_at,
                                   node_conditions=self.state.node_conditions)
        self.wake.set()

    def note_wake(self, reason: str) -> None:
        """A kernel notifier woke the loop (wired as event_waker's on_reason): the first one since
        the last pass is named, with its time, in an evicting pass's timing log."""
        if self._woken is None:
            self._woken = (reason, self.clock.now())

    def use_poll(self, next_interval: Callable[[dict[str, Observation]], float]) -> None:
        """How long to sleep between passes at most, from the last observations (adaptive poll)."""
        self.next_interval = next_interval

    # ---- one pass ----
    def observe_now(self) -> dict[str, Observation]:
        """Observe without deciding (start-up: the wake-up lines need a first observation)."""
        return self._observe()

    def _observe(self) -> dict[str, Observation]:
        obs = self.observe()
        self.last_observations = obs
        return obs

    async def synchronize(self) -> PassResult:
        started = self.clock.now()
        observations = self._observe()
        observed_at = self.clock.now()
        before = self.state.node_conditions
        self.state, decision = step(self.state, self.thresholds, observations, self.clock.now(),
                                    pressure_transition_period=self.transition_period)
        result = PassResult(conditions=self.state.node_conditions, previous_conditions=before)
        if self.local_storage is not None and await self._local_storage_eviction(result):
            return self._done(result)
        if not decision.evict or decision.threshold is None or decision.resource is None:
            return self._done(result)
        threshold, resource = decision.threshold, decision.resource
        signal = threshold.signal
        observed = decision.observation
        amount = decision.amount
        result.signal = signal
        if resource in DISK_RESOURCES:  # node-level garbage first, then unused images, looking again after each
            if await self._reclaim_node_level(threshold, result):
                return self._done(result)
            observed = self.last_observations[signal]
            amount = reclaim_amount(threshold, observed)
        evictable = self.pods.evictable_pods()
        self._evicted &= {p.pod.metadata.uid for p in evictable}  # forget pods that are gone (or readmitted later)
        candidates = [p for p in evictable if p.pod.metadata.uid not in self._evicted]
        usage_from = self.clock.now()
        usage = await self.pods.usage([p.pod for p in candidates], resource)
        usage_at = self.clock.now()
        victims = [p.pod for p in select_victims(rank_for_signal(signal, candidates, usage), usage, amount, resource)]
        if not victims:
            log.warning("eviction_no_victim", signal=signal, observed=observed.available if observed else None)
            return self._done(result)
        result.observed = observed
        chosen_at = self.clock.now()
        if is_hard(threshold):  # grace 0: the kill first; events, records and the stop path after it
            for p in victims:
                self.pods.kill(p)
        await asyncio.gather(*(self._evict(p, threshold, observed, usage, resource) for p in victims))
        result.evicted = tuple(p.key for p in victims)
        woken_by, woken_at = self._pass_woken
        # where an eviction's time went (bench/earlyoom_compare.py breaks the reaction down with it)
        log.info("eviction_pass_timing", victims=list(result.evicted), woken_by=woken_by, woken_at=woken_at,
                 started=started, observe_ms=_ms(observed_at - started), decide_ms=_ms(usage_from - observed_at),
                 usage_ms=_ms(usage_at - usage_from), select_ms=_ms(chosen_at - usage_at),
                 evict_ms=_ms(self.clock.now() - chosen_at))
        self.wake.set()  # re-observe right after the kills completed
        return self._done(result)

    async def _local_storage_eviction(self, result: PassResult) -> bool:
        """The kubelet's localStorageEviction: every pod over a local-storage limit evicted at
        once (grace 0, in parallel); True when any was."""
        assert self.local_storage is not None
        over = [(p, v) for p, v in await self.local_storage() if p.metadata.uid not in self._evicted]
        if not over:
            return False
        for pod, v in over:
            self._evicted.add(pod.metadata.uid)
            self.events.record(EVICTION_REASON, v.message, namespace=pod.metadata.namespace, name=pod.metadata.name,
                               uid=pod.metadata.uid, signal=v.signal, grace_period=0)
            self.evictions_total[v.signal] = self.evictions_total.get(v.signal, 0) + 1
            log.info("eviction_local_storage", pod=pod.key, signal=v.signal, message=v.message)
        await asyncio.gather(*(self.pods.evict(pod, 0, v.message) for pod, v in over))
        result.signal = LOCAL_STORAGE
        result.evicted = tuple(p.key for p, _ in over)
        self.wake.set()  # the threshold decisions: at once, in the next pass
        return True

    async def _reclaim_node_level(self, threshold: Threshold, result: PassResult) -> bool:
        """The kubelet's reclaimNodeLevelResources: dead containers' and pods' data, then (where
        the signal's filesystem holds them) unused images; True when that resolved the threshold
        (minReclaim included), so no pod is evicted."""
        signal = threshold.signal
        result.reclaimed_bytes = await self.pods.reclaim_node_garbage()
        observations = self._observe()
        if not thresholds_met([threshold], observations, enforce_min_reclaim=True):
            log.info("eviction_reclaimed_node_garbage", signal=signal, bytes=result.reclaimed_bytes)
            return True
        needed = image_reclaim_bytes(threshold, observations.get(signal), dedicated_imagefs=self.dedicated_imagefs())
        if self.images is None or needed <= 0:
            return False
        try:
            result.reclaimed_image_bytes = await self.images.reclaim(needed)
        except Exception:  # a failed image deletion must not keep the pods' eviction from happening
            log.exception("eviction_image_reclaim_failed", signal=signal, bytes_needed=needed)
            return False
        result.reclaimed_bytes += result.reclaimed_image_bytes
        observations = self._observe()
        resolved = not thresholds_met([threshold], observations, enforce_min_reclaim=True)
        log.info("eviction_reclaimed_images", signal=signal, bytes_needed=needed,
                 bytes=result.reclaimed_image_bytes, resolved=resolved)
        return resolved

    async def _evict(self, pod: Pod, threshold: Threshold, observed: Observation | None,
                     usage: dict[str, PodUsage], resource: str) -> None:
        self._evicted.add(pod.metadata.uid)
        grace = 0 if is_hard(threshold) else eviction_grace_period(threshold, pod, self.max_pod_grace_period)
        message = eviction_message(resource, threshold, observed, pod, usage.get(pod.metadata.uid))
        self.events.record(EVICTION_REASON, message, namespace=pod.metadata.namespace, name=pod.metadata.name,
                           uid=pod.metadata.uid, signal=threshold.signal, threshold=threshold.value_text(),
                           observed=observed.available if observed else None, grace_period=grace)
        self.evictions_total[threshold.signal] = self.evictions_total.get(threshold.signal, 0) + 1
        await self.pods.evict(pod, grace, message)

    def _done(self, result: PassResult) -> PassResult:
        if result.conditions != result.previous_conditions:  # after the kills: a log line costs ~1 ms in the guest
            log.info("node_conditions_changed", conditions=list(result.conditions),
                     previous=list(result.previous_conditions))
        for hook in self.on_pass:
            hook(result)
        return result

    # ---- the loop ----
    def _sleep_for(self) -> float:
        if self.next_interval is None or not self.last_observations:
            return self.interval
        return min(self.interval, self.next_interval(self.last_observations))

    async def _sleep(self, seconds: float) -> str:
        """Sleep until the next pass: "again" when woken, "poll" when the time is up, "look" when a
        look at the memory signals between the slices (near a line: look_slices) found a memory
        threshold the last pass did not find met."""
        slices = look_slices(seconds) if self.observe_memory is not None else [seconds]
        for i, part in enumerate(slices):
            try:
                await wait_for(self.wake.wait(), part)
                return "again"
            except TimeoutError:
                pass
            if i < len(slices) - 1 and self._look():
                return "look"
        return "poll"

    def _look(self) -> bool:
        """Whether the memory signals alone show a memory threshold newly met (a failed read: a
        pass now, which observes and logs properly)."""
        assert self.observe_memory is not None
        try:
            observations = self.observe_memory()
        except OSError:
            return True
        memory = [t for t in self.thresholds if t.signal in MEMORY_SIGNALS]
        return bool(newly_met(memory, observations, self.state.thresholds_met))

    async def run(self) -> None:
        self.progress.beat()
        while True:
            self.wake.clear()
            try:
                await self.synchronize()
            except Exception:  # one bad pass must not end protection of the node
                log.exception("eviction_pass_failed")
            self.progress.beat()
            why = "again"  # woken without a notifier: after kills, a reload
            if not self.wake.is_set():
                why = await self._sleep(self._sleep_for())
            self._pass_woken, self._woken = self._woken or (why, self.clock.now()), None

def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
