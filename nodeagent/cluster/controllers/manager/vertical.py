"""The VerticalPodAutoscaler's thin loops: the recommender and the updater (autoscaling/vpa around them).

Recommender ("vpa-recommender", vertical-pod-autoscaler/pkg/recommender/routines): every
`recommender_interval` (1 min upstream) each VPA is synced. Its pods come from its target's scale
subresource selector (the pod informer, hpa's PodIndex), their usage from the server's sample
window: per container and sync, one CPU sample (the rate over the samples new since the last sync,
as upstream takes one metrics-server point a minute, so confidence's samples/1440 a day holds) and
one memory sample (the peak of those samples); an OOM kill seen in a container's lastState adds the
bumped memory sample once. The aggregates (vpa.aggregate, one per container name) give the
estimates (vpa.recommender), capped by the resource policy (vpa.policy) into status.recommendation
with the conditions (vpa.status); a VPA whose spec.recommenders names another recommender first is
left to it. Every `checkpoint_interval` the aggregates are stored as
VerticalPodAutoscalerCheckpoint objects named <vpa>-<container>, and a VPA first seen (a server
restart) loads its aggregates from them, so the history survives; a deleted VPA's checkpoints go.

Updater ("vpa-updater", pkg/updater): every `updater_interval` each VPA in Recreate, Auto or
InPlaceOrRecreate mode gets vpa.updater.plan over its pods (the ReplicaSets' configured replicas,
the PodDisruptionBudgets' disruptionsAllowed) and acts: an eviction goes through pods/eviction (so a
spent budget answers 429 and the pod stays); an in-place resize goes through pods/resize, and when
the server does not serve it (404) the pod is evicted instead. Off never acts; Initial acts only at
admission (admitters/vpa.py).

HPA and VPA on one workload (autoscaling/coexist): both loops read the HPAs of the VPA's namespace
and act on the VPA's effective spec, in which an HPA scaling the same target on a resource's
utilization (a Resource or ContainerResource metric on cpu or memory) owns that resource: the
recommender neither recommends nor the updater applies it, the VPA's status carries the
ConfigUnsupported condition naming what it leaves alone, and when that condition appears (or its
message changes) a Warning event ("ResourceOwnedByHPA") goes to the VPA and to each HPA concerned.
Removing the HPA gives the resource back at the next recommendation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog

from nodeagent.cluster.autoscaling.coexist import CONDITION, Resolution, effective_spec, resolve, without_taken
from nodeagent.cluster.autoscaling.hpa.source import container_key
from nodeagent.cluster.autoscaling.hpa.spec import HPASpec, parse_hpa_spec
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.autoscaling.vpa.aggregate import (
    AggregateContainerState,
    AggregationsConfig,
    ContainerState,
    OOMTooOld,
)
from nodeagent.cluster.autoscaling.vpa.histogram import CheckpointError
from nodeagent.cluster.autoscaling.vpa.policy import (
    container_requests_and_limits,
    controlled_resources,
    recommendation_status,
    recommended_states,
)
from nodeagent.cluster.autoscaling.vpa.recommender import RecommenderConfig, recommend
from nodeagent.cluster.autoscaling.vpa.spec import VPASpec, parse_vpa_spec
from nodeagent.cluster.autoscaling.vpa.status import vpa_status
from nodeagent.cluster.autoscaling.vpa.updater import EVICTED_MESSAGE, UpdaterConfig, creator, plan
from nodeagent.cluster.controllers.common.actions import Event, ObjectRef, Plan, UpdateStatus
from nodeagent.cluster.controllers.common.meta import generation, key, labels, name, namespace, spec
from nodeagent.cluster.controllers.common.meta import status as status_of
from nodeagent.cluster.controllers.common.selectors import matches
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Obj, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.horizontal import PodIndex, Scales, _selector
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock
from nodeagent.core.errors import ValidationErrors
from nodeagent.core.timefmt import parse_rfc3339

log = structlog.get_logger(__name__)

API_VERSION = "autoscaling.k8s.io/v1"
KIND, CHECKPOINT_KIND = "VerticalPodAutoscaler", "VerticalPodAutoscalerCheckpoint"
RECOMMENDER, UPDATER = "vpa-recommender", "vpa-updater"
DEFAULT_RECOMMENDER = "default"  # vpa-recommender's --recommender-name
OWNED_BY_HPA = "ResourceOwnedByHPA"  # the Warning event when an HPA takes a resource from a VPA


@runtime_checkable
class PodActions(Protocol):
    """What the updater does to a pod: POST pods/<name>/eviction, PATCH pods/<name>/resize (a JSON
    patch); both raise ApiError with the server's answer (429 from a budget, 404 when not served)."""

    async def evict(self, namespace: str, name: str) -> None: ...

    async def resize(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> None: ...


@dataclass(frozen=True, slots=True)
class VerticalSettings:
    """vpa-recommender's and vpa-updater's flags (--recommender-interval, --checkpoints-timeout's
    period, --updater-interval), and the pure cores' configs."""

    recommender_interval: float = 60.0
    checkpoint_interval: float = 60.0
    updater_interval: float = 60.0
    aggregations: AggregationsConfig = field(default_factory=AggregationsConfig)
    recommender: RecommenderConfig = field(default_factory=RecommenderConfig)
    updater: UpdaterConfig = field(default_factory=UpdaterConfig)


def _vpa_spec(vpa: Mapping[str, Any]) -> VPASpec | None:
    try:
        return parse_vpa_spec(vpa.get("spec"))
    except ValidationErrors:
        return None


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in spec(pod).get("containers") or [] if isinstance(c, Mapping)]


def recommended_here(vpa: Mapping[str, Any], recommender: str = DEFAULT_RECOMMENDER) -> bool:
    """The cluster feeder's filter (KEP "customized recommenders"): a VPA naming recommenders is left
    to the first one named; one naming none goes to the default recommender."""
    named = spec(vpa).get("recommenders")
    if not isinstance(named, list) or not named:
        return recommender == DEFAULT_RECOMMENDER
    first = named[0]
    return isinstance(first, Mapping) and first.get("name") == recommender


def checkpoint_name(vpa: str, container: str) -> str:
    """The checkpoint object's name, as upstream's checkpoint writer names it."""
    return f"{vpa}-{container}"


class _Owners:
    """The HPAs next to a VPA (coexist): which of the VPA's resources they own."""

    def __init__(self, hpas: Informer | None) -> None:
        self.hpas = hpas

    def on_change(self, enqueue_namespace: Callable[[str], None]) -> None:
        """Sync a namespace's VPAs when one of its HPAs comes, goes or changes its metrics."""
        if self.hpas is None:
            return

        def updated(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
            if spec(old) != spec(new):
                enqueue_namespace(namespace(new))

        self.hpas.add_handlers(Handlers(lambda h: enqueue_namespace(namespace(h)), updated,
                                        lambda h: enqueue_namespace(namespace(h))))

    def _parsed(self, ns: str) -> list[tuple[Mapping[str, Any], HPASpec]]:
        out = []
        for hpa in self.hpas.in_namespace(ns) if self.hpas is not None else ():
            try:
                out.append((hpa, parse_hpa_spec(spec(hpa))))
            except ValidationErrors:
                continue  # the API validates HPAs; one that does not parse scales nothing
        return out

    def resolve(self, vpa: Mapping[str, Any], parsed: VPASpec,
                containers: Sequence[str]) -> tuple[VPASpec, Resolution, list[Mapping[str, Any]]]:
        """The VPA's effective spec, the resolution, and the HPAs that took something."""
        hpas = self._parsed(namespace(vpa))
        resolution = resolve(parsed, name(vpa), [(name(h), p) for h, p in hpas], containers)
        if not resolution.taken:
            return parsed, resolution, []
        owners = [h for h, _ in hpas if name(h) in resolution.by_hpa]
        return effective_spec(parsed, resolution), resolution, owners


def _container_names(pods: Sequence[Mapping[str, Any]], known: Sequence[str]) -> list[str]:
    return sorted({str(c.get("name", "")) for p in pods for c in _containers(p)} | set(known))


class _Targets:
    """A VPA's pods: its target's scale selector over the pod index (shared by both loops)."""

    def __init__(self, scales: Scales, index: PodIndex) -> None:
        self.scales, self.index = scales, index

    async def pods(self, vpa: Mapping[str, Any], parsed: VPASpec) -> tuple[list[Mapping[str, Any]], str | None]:
        ref = parsed.target_ref
        try:
            scale = await self.scales.get_scale(ref.get("apiVersion", ""), ref.get("kind", ""), namespace(vpa),
                                                ref.get("name", ""))
        except ApiError as e:
            return [], e.message
        selector = _selector(str(status_of(scale).get("selector") or ""))
        return ([] if selector is None else self.index.select(namespace(vpa), selector)), None


class VPARecommender(Controller):
    name = RECOMMENDER

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, vpas: Informer,
                 checkpoints: Informer, pods: Informer, scales: Scales, window: SampleWindow | None,
                 settings: VerticalSettings | None = None, index: PodIndex | None = None,
                 hpas: Informer | None = None) -> None:
        super().__init__(clock)
        self.client, self.vpas, self.checkpoints, self.window = client, vpas, checkpoints, window
        self.recorder = recorder
        self.owners = _Owners(hpas)
        self.owners.on_change(self._enqueue_namespace)
        self.settings = settings or VerticalSettings()
        self.executor = Executor(client, recorder, RECOMMENDER)
        self.targets = _Targets(scales, index or PodIndex(pods))
        self.aggregates: dict[str, dict[str, AggregateContainerState]] = {}  # VPA key -> container -> state
        self.containers: dict[tuple[str, str, str], ContainerState] = {}  # (VPA key, pod key, container)
        self.fed: dict[tuple[str, str, str], tuple[float, int]] = {}  # ... -> last sample fed (time, CPU ns)
        self.ooms: set[tuple[str, str, str, str]] = set()  # (VPA key, pod key, container, finishedAt) seen
        self.checkpointed: dict[str, float] = {}  # VPA key -> when its checkpoints were last written
        self.oom_horizon: dict[str, float] = {}  # VPA key -> OOMs up to then came with its checkpoints
        vpas.add_handlers(Handlers(lambda v: self.enqueue(key(v)), self._updated, lambda v: self.enqueue(key(v))))

    def _updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if spec(old) != spec(new):
            self.enqueue(key(new))

    def _enqueue_namespace(self, ns: str) -> None:
        for vpa in self.vpas.in_namespace(ns):
            self.enqueue(key(vpa))

    def _warn_ownership(self, vpa: Mapping[str, Any], resolution: Resolution, hpas: Sequence[Mapping[str, Any]],
                        previous: Sequence[Any]) -> None:
        """A Warning event on the VPA and on each HPA concerned, once per change of the condition."""
        condition = resolution.condition
        before = next((c for c in previous if isinstance(c, Mapping) and c.get("type") == CONDITION), None)
        if condition is None or self.recorder is None:
            return
        if before is not None and before.get("status") == "True" and before.get("message") == condition["message"]:
            return  # said already
        log.info("vpa_resources_owned_by_hpa", vpa=key(vpa), hpas=",".join(name(h) for h in hpas),
                 message=condition["message"])
        for warning in resolution.warnings:
            self.recorder.event({**vpa, "apiVersion": API_VERSION, "kind": KIND}, "Warning", OWNED_BY_HPA, warning)
        for hpa in hpas:
            for warning in resolution.by_hpa.get(name(hpa), ()):
                self.recorder.event({**hpa, "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"},
                                    "Warning", OWNED_BY_HPA, warning)

    def _forget(self, k: str) -> None:
        self.aggregates.pop(k, None)
        self.checkpointed.pop(k, None)
        self.oom_horizon.pop(k, None)
        for d in (self.containers, self.fed):
            for c in [c for c in d if c[0] == k]:
                del d[c]
        self.ooms = {o for o in self.ooms if o[0] != k}

    def _prune(self, k: str, current: set[str], states: dict[str, AggregateContainerState], now: float) -> None:
        """Forget the pods gone from the VPA's target and the containers unseen for the memory window
        (8 days: the aggregate's isExpired, upstream's garbage collection)."""
        for d in (self.containers, self.fed):
            for c in [c for c in d if c[0] == k and c[1] not in current]:
                del d[c]
        self.ooms = {o for o in self.ooms if o[0] != k or o[1] in current}
        for container in [n for n, state in states.items() if state.is_expired(now)]:
            del states[container]

    def _own_checkpoints(self, ns: str, vpa_name: str) -> list[Mapping[str, Any]]:
        return [c for c in self.checkpoints.in_namespace(ns) if spec(c).get("vpaObjectName") == vpa_name]

    def _load(self, k: str, vpa: Mapping[str, Any]) -> dict[str, AggregateContainerState]:
        """The aggregates of a VPA first seen: from its checkpoints (a restart keeps the history)."""
        states: dict[str, AggregateContainerState] = {}
        now = self.clock.wall()
        for cp in self._own_checkpoints(namespace(vpa), name(vpa)):
            container = str(spec(cp).get("containerName") or "")
            saved = parse_rfc3339(status_of(cp).get("lastUpdateTime"))
            if saved is not None:  # OOMs before it are in the histogram already
                self.oom_horizon[k] = max(self.oom_horizon.get(k, saved), saved)
            try:
                states[container] = AggregateContainerState.from_checkpoint(status_of(cp), self.settings.aggregations,
                                                                            now)
            except CheckpointError as e:
                log.warning("vpa_checkpoint_unreadable", vpa=k, container=container, error=str(e))
        if states:
            log.info("vpa_checkpoints_loaded", vpa=k, containers=",".join(sorted(states)))
        return states

    def _feed(self, k: str, pod: Mapping[str, Any], states: dict[str, AggregateContainerState]) -> None:
        """One CPU and one memory sample per container from the window's new samples, once there is a
        rate (a series' first sample alone waits for the next, as metrics-server leaves such a pod out);
        OOM bumps."""
        pk, ns = key(pod), namespace(pod)
        for c in _containers(pod):
            cname = str(c.get("name", ""))
            agg = states.get(cname)
            if agg is None:
                agg = states[cname] = AggregateContainerState(self.settings.aggregations, self.clock.wall())
            requests, _ = container_requests_and_limits(c)
            memory_request = requests["memory"].value() if "memory" in requests else 0
            ck = (k, pk, cname)
            cs = self.containers.get(ck)
            if cs is None or cs.aggregate is not agg:
                cs = self.containers[ck] = ContainerState(agg)
            cs.memory_request = memory_request
            samples = [] if self.window is None else self.window.samples(container_key(ns, name(pod), cname))
            last = self.fed.get(ck)
            new = [s for s in samples if last is None or s[0] > last[0]]
            start_t, start_cpu = last if last is not None else (new[0][0], new[0][1]) if new else (0.0, 0)
            if new and new[-1][0] > start_t:  # a rate (two samples at least), as a metrics-server point has
                end_t, end_cpu, _ = new[-1]
                if end_cpu >= start_cpu:  # not a counter reset (a restarted container)
                    cs.add_cpu_sample(round((end_cpu - start_cpu) / (end_t - start_t) / 1e6), start_t)
                peak_t, _, peak = max(new, key=lambda s: s[2])
                cs.add_memory_sample(peak, peak_t)
                self.fed[ck] = (end_t, end_cpu)
            self._oom(k, pod, cname, cs)

    def _oom(self, k: str, pod: Mapping[str, Any], cname: str, cs: ContainerState) -> None:
        for st in status_of(pod).get("containerStatuses") or []:
            if not isinstance(st, Mapping) or st.get("name") != cname:
                continue
            term = (st.get("lastState") or {}).get("terminated")
            if not isinstance(term, Mapping) or term.get("reason") != "OOMKilled":
                continue
            finished = str(term.get("finishedAt") or "")
            t = parse_rfc3339(finished)
            seen = (k, key(pod), cname, finished)
            if t is None or seen in self.ooms or t <= self.oom_horizon.get(k, -1e18):
                continue
            self.ooms.add(seen)
            try:
                cs.record_oom(t)
                log.info("vpa_oom_recorded", vpa=k, pod=key(pod), container=cname)
            except OOMTooOld as e:
                log.info("vpa_oom_discarded", vpa=k, pod=key(pod), container=cname, error=str(e))

    async def sync(self, k: str) -> float | None:
        vpa = self.vpas.get(k)
        if vpa is None:
            self._forget(k)
            ns, _, vpa_name = k.partition("/")
            for cp in self._own_checkpoints(ns, vpa_name):
                try:
                    await self.client.resource(API_VERSION, CHECKPOINT_KIND).delete(ns, name(cp))
                except ApiError as e:
                    if not e.not_found:
                        raise
            return None
        parsed = _vpa_spec(vpa)
        if parsed is None or not recommended_here(vpa):
            return self.settings.recommender_interval
        now = self.clock.wall()
        states = self.aggregates.get(k)
        if states is None:
            states = self.aggregates[k] = self._load(k, vpa)
        pods, error = await self.targets.pods(vpa, parsed)
        for pod in pods:
            self._feed(k, pod, states)
        self._prune(k, {key(p) for p in pods}, states, now)
        live = {n: s for n, s in states.items() if s.total_samples > 0 or not s.memory.is_empty()}
        effective, resolution, owners = self.owners.resolve(vpa, parsed, _container_names(pods, sorted(live)))
        kept = recommended_states(live, effective)
        estimates = recommend(kept, self.settings.recommender, controlled_resources(effective, sorted(kept)))
        recommendation = recommendation_status(estimates, effective) if estimates else None
        previous = vpa.get("status") if isinstance(vpa.get("status"), Mapping) else {}
        assert isinstance(previous, Mapping)
        status = vpa_status(recommendation, bool(pods), now, generation=generation(vpa),
                            previous=previous.get("conditions") or (),
                            extra=[resolution.condition] if resolution.condition is not None else ())
        self._warn_ownership(vpa, resolution, owners, previous.get("conditions") or ())
        actions: Plan = Plan()
        if error is not None:
            actions.add(Event(ObjectRef.of(vpa, API_VERSION, KIND), "Warning", "FailedGetScale", error))
        if dict(previous) != status:
            actions.add(UpdateStatus({**vpa, "apiVersion": API_VERSION, "kind": KIND, "status": status}))
        result = await self.executor.run(actions)
        if result.error is not None:
            raise result.error
        if live and now - self.checkpointed.get(k, -1e18) >= self.settings.checkpoint_interval:
            await self._checkpoint(vpa, live, now)
            self.checkpointed[k] = now
        return self.settings.recommender_interval

    async def _checkpoint(self, vpa: Mapping[str, Any], states: Mapping[str, AggregateContainerState],
                          now: float) -> None:
        """Write each container's aggregate to its checkpoint object (created, or replaced whole)."""
        ns, resource = namespace(vpa), self.client.resource(API_VERSION, CHECKPOINT_KIND)
        for container, state in sorted(states.items()):
            cp_name = checkpoint_name(name(vpa), container)
            body: Obj = {"apiVersion": API_VERSION, "kind": CHECKPOINT_KIND,
                         "metadata": {"name": cp_name, "namespace": ns},
                         "spec": {"vpaObjectName": name(vpa), "containerName": container},
                         "status": state.to_checkpoint(now)}
            existing = self.checkpoints.get(f"{ns}/{cp_name}")
            try:
                if existing is None:
                    await resource.create(ns, body)
                else:
                    body["metadata"] = {**existing["metadata"]}
                    await resource.update(ns, body)
            except ApiError as e:
                if not (e.already_exists or e.conflict):
                    raise
                stored = await resource.get(ns, cp_name)  # written meanwhile: replace the stored version
                body["metadata"] = {**stored["metadata"]}
                await resource.update(ns, body)
        log.debug("vpa_checkpoints_written", vpa=key(vpa), containers=len(states))


class VPAUpdater(Controller):
    name = UPDATER

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, vpas: Informer, pods: Informer,
                 replicasets: Informer, pdbs: Informer, scales: Scales, actions: PodActions,
                 settings: VerticalSettings | None = None, index: PodIndex | None = None,
                 hpas: Informer | None = None) -> None:
        super().__init__(clock)
        self.vpas, self.replicasets, self.pdbs, self.actions = vpas, replicasets, pdbs, actions
        self.owners = _Owners(hpas)
        self.recorder = recorder
        self.settings = settings or VerticalSettings()
        self.targets = _Targets(scales, index or PodIndex(pods))
        self.attempts: dict[str, dict[str, float]] = {}  # VPA key -> pod -> when its in-place resize began
        vpas.add_handlers(Handlers(lambda v: self.enqueue(key(v)), self._updated, self._deleted))

    def _deleted(self, vpa: Mapping[str, Any]) -> None:
        self.attempts.pop(key(vpa), None)

    def _updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if spec(old) != spec(new) or status_of(old).get("recommendation") != status_of(new).get("recommendation"):
            self.enqueue(key(new))

    def _budgets(self, ns: str, pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, list[str]]]:
        allowed: dict[str, int] = {}
        covering: dict[str, list[str]] = {}
        for pdb in self.pdbs.in_namespace(ns):
            allowed[name(pdb)] = int(status_of(pdb).get("disruptionsAllowed") or 0)
            for pod in pods:
                if matches(spec(pdb).get("selector"), labels(pod)):
                    covering.setdefault(name(pod), []).append(name(pdb))
        return allowed, covering

    def _configured(self, ns: str, pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for pod in pods:
            owner = creator(pod)
            if owner is not None and owner.startswith("ReplicaSet/"):
                rs = self.replicasets.get(f"{ns}/{owner.partition('/')[2]}")
                if rs is not None and isinstance(spec(rs).get("replicas"), int):
                    out[owner] = spec(rs)["replicas"]
        return out

    def _event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event({**obj, "apiVersion": "v1" if kind == "Pod" else API_VERSION, "kind": kind},
                                "Normal", reason, message)

    async def _evict(self, vpa: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        try:
            await self.actions.evict(namespace(pod), name(pod))
        except ApiError as e:
            log.info("vpa_eviction_refused", vpa=key(vpa), pod=key(pod), code=e.code, error=e.message)
            return False
        log.info("vpa_pod_evicted", vpa=key(vpa), pod=key(pod))
        self._event(pod, "Pod", "EvictedByVPA", EVICTED_MESSAGE)
        self._event(vpa, KIND, "EvictedPod", f"VPA Updater evicted Pod {name(pod)} to apply resource "
                                             "recommendation.")
        return True

    async def sync(self, k: str) -> float | None:
        vpa = self.vpas.get(k)
        if vpa is None:
            self.attempts.pop(k, None)
            return None
        parsed = _vpa_spec(vpa)
        if parsed is None or parsed.update_mode in ("Off", "Initial"):
            return self.settings.updater_interval
        pods, _ = await self.targets.pods(vpa, parsed)
        ns = namespace(vpa)
        allowed, covering = self._budgets(ns, pods)
        # what an HPA owns is never applied, even from a recommendation made before the HPA came
        effective, resolution, _ = self.owners.resolve(vpa, parsed, _container_names(pods, ()))
        recommendation = without_taken(status_of(vpa).get("recommendation"), resolution)
        decided = plan(effective, recommendation, pods, self.clock.wall(), self.settings.updater,
                       configured_replicas=self._configured(ns, pods), pdb_allowed=allowed, pod_pdbs=covering,
                       in_place_attempts=self.attempts.get(k, {}))
        attempts = dict(decided.in_place_attempts)
        by_name = {name(p): p for p in pods}
        for d in decided.decisions:
            pod = by_name[d.pod]
            if d.action == "evict":
                await self._evict(vpa, pod)
            elif d.action == "resize":
                try:
                    await self.actions.resize(ns, d.pod, d.patch)
                except ApiError as e:
                    attempts.pop(d.pod, None)
                    if e.not_found:  # the server does not serve pods/resize: recreate instead
                        log.info("vpa_resize_unavailable", vpa=k, pod=key(pod), error=e.message)
                        await self._evict(vpa, pod)
                    else:
                        log.info("vpa_resize_refused", vpa=k, pod=key(pod), code=e.code, error=e.message)
                    continue
                log.info("vpa_pod_resized", vpa=k, pod=key(pod))
                self._event(pod, "Pod", "InPlaceResizedByVPA", d.reason)
                self._event(vpa, KIND, "InPlaceResizedPod", f"VPA Updater resized Pod {d.pod} in place to apply "
                                                            "resource recommendation.")
        self.attempts[k] = attempts
        return self.settings.updater_interval
