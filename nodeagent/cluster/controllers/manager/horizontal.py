"""The HorizontalPodAutoscaler's thin loop (podautoscaler/horizontal.go around autoscaling/hpa).

Every sync period (15 s upstream: --horizontal-pod-autoscaler-sync-period; 1 s in the fast mode of
hpa.fast) each HPA is synced: the target's scale is read through the scale subresource, its pods
come from the pod informer by the scale's selector, their metrics from the server's sample window
(hpa.source.WindowReader), and the pure `reconcile` says what to do; the loop writes the scale
(through the scale subresource, so only spec.replicas moves), then the status when it changed,
and records the events (SuccessfulRescale, FailedGetScale, FailedGetResourceMetric...).

As upstream, a sync is always followed by the next one a period later, whatever happened, and a
change of an HPA's spec is synced at once; the HPA's own status writes do not wake it (upstream's
queue drops the extra request). The per-HPA History (the recommendations and scale events the
stabilization windows and rate policies need) lives in memory, as upstream's: a server restart
starts it afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog

from nodeagent.cluster.autoscaling.hpa.controller import ControllerConfig, FastMode, Scale, reconcile, rescale_failed
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import PodInfo, pod_info
from nodeagent.cluster.autoscaling.hpa.source import WindowReader
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
DEFAULT_METRIC_WINDOW = 16.0  # seconds of samples read without a window of the scrape's: one 15 s scrape


@runtime_checkable
class Scales(Protocol):
    """The scale subresource of any kind that has one (autoscaling/v1 Scale objects)."""

    async def get_scale(self, api_version: str, kind: str, namespace: str, name: str) -> Obj: ...

    async def update_scale(self, api_version: str, kind: str, namespace: str, name: str, replicas: int) -> Obj: ...


@dataclass(frozen=True, slots=True)
class HorizontalSettings:
    """kube-controller-manager's --horizontal-pod-autoscaler-* flags, plus the metric source.

    `metric_window`: seconds of samples a pod's usage is read over (the scrape's rate window, so a
    value is metrics-server's last one). `fast`: the fast first reaction of hpa.fast (its own
    windows and a sync every `fast.sync_period`), None for upstream's behaviour.
    """

    sync_period: float = DEFAULT_SYNC_PERIOD
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    metric_window: float = DEFAULT_METRIC_WINDOW
    fast: FastConfig | None = None

    @property
    def period(self) -> float:
        return self.fast.sync_period if self.fast is not None else self.sync_period


def _scale(raw: Mapping[str, Any]) -> Scale:
    spec_, status = spec(raw), status_of(raw)
    return Scale(int(spec_.get("replicas") or 0), int(status.get("replicas") or 0), str(status.get("selector") or ""))


def _selector(text: str) -> LabelSelector | None:
    try:
        return parse_label_selector(text)
    except SelectorError:
        return None


class HorizontalController(Controller):
    name = "horizontalpodautoscaling"
    workers = 2

    def __init__(self, clock: Clock, client: Client, recorder: Recorder | None, *, hpas: Informer, pods: Informer,
                 scales: Scales, window: SampleWindow | None, settings: HorizontalSettings | None = None) -> None:
        super().__init__(clock)
        self.hpas, self.pods, self.scales, self.window = hpas, pods, scales, window
        self.settings = settings or HorizontalSettings()
        self.executor = Executor(client, recorder, COMPONENT)
        self.histories: dict[str, History] = {}
        self.selectors: dict[str, str] = {}  # HPA key -> its target's selector at its last sync
        hpas.add_handlers(Handlers(self._added, self._updated, self._deleted))

    def _added(self, hpa: Mapping[str, Any]) -> None:
        self.enqueue(key(hpa))

    def _updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if spec(old) != spec(new):  # not its own status writes: the period brings the next sync
            self.enqueue(key(new))

    def _deleted(self, hpa: Mapping[str, Any]) -> None:
        self.histories.pop(key(hpa), None)
        self.selectors.pop(key(hpa), None)

    def _selected(self, ns: str, selector: str) -> list[Mapping[str, Any]]:
        parsed = _selector(selector) if selector else None
        if parsed is None:
            return []
        return [p for p in self.pods.in_namespace(ns) if parsed.matches(labels(p))]

    def _competing(self, k: str, ns: str, pods: Sequence[Mapping[str, Any]]) -> list[str]:
        """Other HPAs of the namespace whose targets select any of these pods (hpaSelectors)."""
        out = []
        for other, selector in self.selectors.items():
            if other == k or not other.startswith(f"{ns}/") or self.hpas.get(other) is None:
                continue
            parsed = _selector(selector)
            if parsed is not None and any(parsed.matches(labels(p)) for p in pods):
                out.append(other)
        return out

    def _readers(self, ns: str, pods: Sequence[PodInfo], now: float) -> tuple[WindowReader, FastMode | None]:
        fast = self.settings.fast
        if fast is None:
            return WindowReader(self.window, ns, pods, now, self.settings.metric_window), None
        steady = WindowReader(self.window, ns, pods, now, fast.steady_metric_window)
        quick = WindowReader(self.window, ns, pods, now, fast.quick_metric_window)
        return steady, FastMode(quick, fast)

    async def sync(self, k: str) -> float | None:
        hpa = self.hpas.get(k)
        if hpa is None:
            self.histories.pop(k, None)
            self.selectors.pop(k, None)
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
            self.selectors[k] = scale.selector
            competing = self._competing(k, ns, pod_objects)
        pods = [pod_info(p) for p in pod_objects]
        reader, fast = self._readers(ns, pods, now)
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
        if outcome.error is not None:
            log.info("hpa_sync_error", hpa=k, error=outcome.error)
        involved = ObjectRef.of(hpa, API_VERSION, KIND)
        actions: list[Action] = [Event(involved, "Warning" if e.type == "Warning" else "Normal", e.reason, e.message)
                                 for e in outcome.events]
        if dict(previous) != outcome.status:
            actions.append(UpdateStatus({**hpa, "apiVersion": API_VERSION, "kind": KIND, "status": outcome.status}))
        result = await self.executor.run(Plan(actions))
        if result.error is not None:
            raise result.error
        return self.settings.period

