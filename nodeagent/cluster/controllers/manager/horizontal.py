"""The HorizontalPodAutoscaler's thin loop (podautoscaler/horizontal.go around autoscaling/hpa).

Every sync period (15 s upstream: --horizontal-pod-autoscaler-sync-period; 1 s in the fast mode of
hpa.fast) each HPA is synced: the target's scale is read through the scale subresource, its pods
come from the pod informer by the scale's selector, their metrics from the server's sample window
(hpa.source.WindowReader; External metrics fetched first from the configured source,
metrics.external, as upstream's sync queries the external metrics API), and the pure `reconcile`
says what to do; the loop writes the scale (through the scale subresource, so only spec.replicas
moves), then the status when it changed, and records the events (SuccessfulRescale, FailedGetScale,
FailedGetResourceMetric...).

As upstream, a sync is always followed by the next one a period later, whatever happened, and a
change of an HPA's spec is synced at once; the HPA's own status writes do not wake it (upstream's
queue drops the extra request). The per-HPA History (the recommendations and scale events the
stabilization windows and rate policies need) lives in memory, as upstream's: a server restart
starts it afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog

from nodeagent.cluster.autoscaling.hpa.controller import ControllerConfig, FastMode, Scale, reconcile, rescale_failed
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import PodInfo, pod_info
from nodeagent.cluster.autoscaling.hpa.source import ExternalValues, WindowReader, external_key
from nodeagent.cluster.autoscaling.metrics.external import (
    ExternalMetricError,
    ExternalSource,
    Sample,
    selector_from_dict,
)
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.common.actions import Action, Event, ObjectRef, Plan, UpdateStatus
from nodeagent.cluster.controllers.common.meta import key, labels, namespace, spec
from nodeagent.cluster.controllers.common.meta import status as status_of
from nodeagent.cluster.controllers.manager.client import ApiError, Client, Obj, Recorder
from nodeagent.cluster.controllers.manager.executor import Executor
from nodeagent.cluster.controllers.manager.informer import Handlers, Informer
from nodeagent.cluster.controllers.manager.loop import Controller
from nodeagent.core.clock import Clock
from nodeagent.core.selectors import LabelSelector, SelectorError, parse_label_selector

log = structlog.get_logger(__name__)

API_VERSION, KIND = "autoscaling/v2", "HorizontalPodAutoscaler"
COMPONENT = "horizontal-pod-autoscaler"
DEFAULT_SYNC_PERIOD = 15.0  # --horizontal-pod-autoscaler-sync-period
DEFAULT_METRIC_WINDOW = 17.0  # metrics-server's 15 s resolution, plus the scrape's slack
DEFAULT_METRIC_MAX_AGE = 17.0  # a series' latest sample is at most a scrape (and its slack) old


@runtime_checkable
class Scales(Protocol):
    """The scale subresource of any kind that has one (autoscaling/v1 Scale objects)."""

    async def get_scale(self, api_version: str, kind: str, namespace: str, name: str) -> Obj: ...

    async def update_scale(self, api_version: str, kind: str, namespace: str, name: str, replicas: int) -> Obj: ...


@dataclass(frozen=True, slots=True)
class HorizontalSettings:
    """kube-controller-manager's --horizontal-pod-autoscaler-* flags, plus the metric source.

    `metric_window`: seconds of samples a pod's usage is read over, back from its latest sample no
    older than `metric_max_age` (the scrape's rate window and resolution: metrics-server's last
    value). `fast`: the fast first reaction of hpa.fast (its own windows, read back from now, and a
    sync every `fast.sync_period`), None for upstream's behaviour.
    """

    sync_period: float = DEFAULT_SYNC_PERIOD
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    metric_window: float = DEFAULT_METRIC_WINDOW
    fast: FastConfig | None = None
    metric_max_age: float = DEFAULT_METRIC_MAX_AGE

    @property
    def period(self) -> float:
        return self.fast.sync_period if self.fast is not None else self.sync_period


def _scale(raw: Mapping[str, Any]) -> Scale:
    spec_, status = spec(raw), status_of(raw)
    return Scale(int(spec_.get("replicas") or 0), int(status.get("replicas") or 0), str(status.get("selector") or ""))


_PARSED: dict[str, LabelSelector | None] = {}  # scale selectors (strings) parsed once


def _selector(text: str) -> LabelSelector | None:
    if text not in _PARSED:
        if len(_PARSED) > 65536:
            _PARSED.clear()
        try:
            _PARSED[text] = parse_label_selector(text)
        except SelectorError:
            _PARSED[text] = None
    return _PARSED[text]


class PodIndex:
    """The pods by (namespace, label, value), fed by the pod informer, so that an HPA's pods are found
    from its selector's equality requirements rather than by matching every pod of the namespace
    (1,000 HPAs over 3,000 pods of one namespace: a few thousand matches a round, not millions)."""

    def __init__(self, pods: Informer) -> None:
        self.pods = pods
        self._by_label: dict[tuple[str, str, str], set[str]] = {}
        pods.add_handlers(Handlers(self._add, self._update, self._remove))
        for pod in pods.items():
            self._add(pod)

    def _add(self, pod: Mapping[str, Any]) -> None:
        k, ns = key(pod), namespace(pod)
        for label, value in labels(pod).items():
            self._by_label.setdefault((ns, label, value), set()).add(k)

    def _remove(self, pod: Mapping[str, Any]) -> None:
        k, ns = key(pod), namespace(pod)
        for label, value in labels(pod).items():
            keys = self._by_label.get((ns, label, value))
            if keys is not None:
                keys.discard(k)
                if not keys:
                    del self._by_label[(ns, label, value)]

    def _update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if labels(old) != labels(new):
            self._remove(old)
            self._add(new)

    def select(self, ns: str, selector: LabelSelector) -> list[Mapping[str, Any]]:
        """The pods of `ns` the selector matches."""
        candidates: set[str] | None = None
        for r in selector.requirements:
            if r.operator in ("=", "==", "in"):
                found: set[str] = set()
                for v in r.values:
                    found |= self._by_label.get((ns, r.key, v), set())
                if candidates is None or len(found) < len(candidates):
                    candidates = found
        if candidates is None:  # no equality: every pod of the namespace is a candidate
            pool = self.pods.in_namespace(ns)
        else:
            pool = [p for k in sorted(candidates) if (p := self.pods.get(k)) is not None]
        return [p for p in pool if selector.matches(labels(p))]


class HorizontalController(Controller):
    name = "horizontalpodautoscaling"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, hpas: Informer, pods: Informer,
                 scales: Scales, window: SampleWindow | None, settings: HorizontalSettings | None = None,
                 external: ExternalSource | None = None) -> None:
        super().__init__(clock)
        self.hpas, self.pods, self.scales, self.window, self.external = hpas, pods, scales, window, external
        self.settings = settings or HorizontalSettings()
        self.executor = Executor(client, recorder, COMPONENT)
        self.histories: dict[str, History] = {}
        self.errors: dict[str, str] = {}  # HPA key -> the error of its last sync
        self.index = PodIndex(pods)
        self.selected: dict[str, set[str]] = {}  # HPA key -> the pods its target selected at its last sync
        self.selecting: dict[str, set[str]] = {}  # pod key -> the HPAs whose targets selected it (hpaSelectors)
        hpas.add_handlers(Handlers(self._added, self._updated, self._deleted))
        pods.add_handlers(Handlers(on_delete=self._pod_deleted))

    def _added(self, hpa: Mapping[str, Any]) -> None:
        self.enqueue(key(hpa))

    def _updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if spec(old) != spec(new):  # not its own status writes: the period brings the next sync
            self.enqueue(key(new))

    def _pod_deleted(self, pod: Mapping[str, Any]) -> None:
        self.selecting.pop(key(pod), None)

    def _deleted(self, hpa: Mapping[str, Any]) -> None:
        self._forget(key(hpa))

    def _forget(self, k: str) -> None:
        self.histories.pop(k, None)
        self.errors.pop(k, None)
        self._record(k, set())

    def _record(self, k: str, pods: set[str]) -> None:
        """Which pods the HPA's target selects now (the reverse index other HPAs' syncs consult)."""
        before = self.selected.pop(k, set())
        for gone in before - pods:
            owners = self.selecting.get(gone)
            if owners is not None:
                owners.discard(k)
                if not owners:
                    del self.selecting[gone]
        for pod in pods - before:
            self.selecting.setdefault(pod, set()).add(k)
        if pods:
            self.selected[k] = pods

    def _selected(self, ns: str, selector: str) -> list[Mapping[str, Any]]:
        parsed = _selector(selector) if selector else None
        return [] if parsed is None else self.index.select(ns, parsed)

    def _competing(self, k: str, pods: set[str]) -> list[str]:
        """Other HPAs whose targets selected any of these pods at their last syncs (hpaSelectors)."""
        others = {h for p in pods for h in self.selecting.get(p, ())} - {k}
        return sorted(h for h in others if self.hpas.get(h) is not None)

    def _readers(self, ns: str, pods: Sequence[PodInfo], now: float,
                 external: ExternalValues) -> tuple[WindowReader, FastMode | None]:
        fast = self.settings.fast
        if fast is None:
            reader = WindowReader(self.window, ns, pods, now, self.settings.metric_window, self.settings.metric_max_age,
                                  external)
            return reader, None
        steady = WindowReader(self.window, ns, pods, now, fast.steady_metric_window, external=external)
        quick = WindowReader(self.window, ns, pods, now, fast.quick_metric_window, external=external)
        return steady, FastMode(quick, fast)

    async def _external(self, hpa: Mapping[str, Any], ns: str) -> ExternalValues:
        """The samples of each of the HPA's External metrics (or why not), fetched concurrently."""
        wanted: dict[str, tuple[str, Mapping[str, Any] | None]] = {}
        for m in spec(hpa).get("metrics") or ():
            ident = ((m.get("external") or {}).get("metric") or {}) if m.get("type") == "External" else None
            if ident and ident.get("name"):
                try:
                    wanted[external_key(str(ident["name"]), ident.get("selector"))] = (
                        str(ident["name"]), ident.get("selector"))
                except ExternalMetricError:
                    continue  # the reader reports the bad selector
        if not wanted or self.external is None:
            return {}
        source = self.external

        async def one(name: str, selector: Mapping[str, Any] | None) -> list[Sample] | ExternalMetricError:
            try:
                return await source.samples(ns, name, selector_from_dict(selector))
            except ExternalMetricError as e:
                return e

        got = await asyncio.gather(*(one(n, s) for n, s in wanted.values()))
        return dict(zip(wanted, got, strict=True))

    async def sync(self, k: str) -> float | None:
        hpa = self.hpas.get(k)
        if hpa is None:
            self._forget(k)
            return None
        ns, now = namespace(hpa), self.clock.wall()
        ref = spec(hpa).get("scaleTargetRef")
        ref = ref if isinstance(ref, Mapping) else {}
        target = (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), ns, str(ref.get("name") or ""))
        scale: Scale | None = None
        scale_error: str | None = None
        try:
            scale = _scale(await self.scales.get_scale(*target))
        except ApiError as e:
            scale_error = e.message
        pod_objects = self._selected(ns, scale.selector) if scale is not None else []
        competing: list[str] = []
        if scale is not None:
            pod_keys = {key(p) for p in pod_objects}
            self._record(k, pod_keys)
            competing = self._competing(k, pod_keys)
        pods = [pod_info(p) for p in pod_objects]
        reader, fast = self._readers(ns, pods, now, await self._external(hpa, ns))
        outcome = reconcile(hpa, scale, pods, reader, self.histories.get(k, History()), now,
                            self.settings.controller, scale_error=scale_error, competing_hpas=competing, fast=fast)
        previous = hpa.get("status") if isinstance(hpa.get("status"), Mapping) else {}
        assert isinstance(previous, Mapping)
        if outcome.rescale and scale is not None:
            try:
                await self.scales.update_scale(*target, outcome.desired_replicas)
            except ApiError as e:
                outcome = rescale_failed(outcome, previous, scale.spec_replicas, e.message, now)
            else:
                log.info("hpa_rescaled", hpa=k, target=f"{target[1]}/{target[3]}", before=scale.spec_replicas,
                         after=outcome.desired_replicas, reason=outcome.rescale_reason)
        self.histories[k] = outcome.history
        if outcome.error != self.errors.get(k):  # logged when it changes, not at every sync
            if outcome.error is not None:
                log.info("hpa_sync_error", hpa=k, error=outcome.error)
            else:
                log.info("hpa_sync_recovered", hpa=k)
        if outcome.error is None:
            self.errors.pop(k, None)
        else:
            self.errors[k] = outcome.error
        involved = ObjectRef.of(hpa, API_VERSION, KIND)
        actions: list[Action] = [Event(involved, "Warning" if e.type == "Warning" else "Normal", e.reason, e.message)
                                 for e in outcome.events]
        if dict(previous) != outcome.status:
            actions.append(UpdateStatus({**hpa, "apiVersion": API_VERSION, "kind": KIND, "status": outcome.status}))
        result = await self.executor.run(Plan(actions))
        if result.error is not None:
            raise result.error
        return self.settings.period

