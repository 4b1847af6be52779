"""Load traces through a simulated Deployment, its pods' CPU counters, a metrics pipeline and the HPA.

Deterministic (a seeded random.Random) and clocked in whole seconds: the world advances 1 s at a
time; a load step, a scrape or a sync happens on a second boundary, with the phases of the scrape
and sync schedules drawn per run so latency is measured over where in the schedule a step lands.

The world: total CPU demand D(t) (cores) is shared by the ready pods, each pod's share multiplied
by (1 + N(0, noise)) every second; each pod's cumulative counter integrates its usage. A new pod
becomes Ready `startup` seconds after it is created and uses no CPU before that; a removed pod goes
at once (the newest first). Requests are 1 core a pod, the target a utilization percentage.

Two pipelines, both through the real code (controller.reconcile and, for the fast one,
metrics.window.SampleWindow):
- "upstream": metrics-server scrapes every `scrape_period` s and reports each pod's rate since its
  previous scrape; the HPA syncs every 15 s with upstream's defaults (no behavior: 300 s downscale
  window, 2x/4 scale-up cap; 300 s CPU initialization, 30 s readiness delay).
- "fast": the agents' 1 s samples land in the server's SampleWindow; the HPA syncs every second with
  hpa.fast (quick scale-up on the last second, all proposals of 4 s agreeing; steady scale-up and
  scale-down on 30 s windows with the 300 s scale-down stabilization).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from nodeagent.cluster.autoscaling.hpa.controller import ControllerConfig, FastMode, Scale, reconcile
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow

NS = 1_000_000_000
EPOCH = 1_700_000_000.0  # wall time of t = 0 (timestamps must look like times)


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    demand: Callable[[float], float]  # cores wanted at second t
    duration: int  # seconds
    step_at: float | None = None  # when the load first rises above what the start needs (for latency)
    noise: float = 0.0  # per-pod, per-second relative noise: the standard deviation, or the bound if uniform
    uniform: bool = False  # noise uniform in [-noise, +noise] instead of Gaussian


def step(base: float, high: float, at: int, duration: int = 900, noise: float = 0.05, uniform: bool = False) -> Trace:
    return Trace(
        f"step {base:g}->{high:g} cores at {at}s", lambda t: base if t < at else high, duration, at, noise, uniform
    )


def spike(base: float, peak: float, at: int, length: int, duration: int = 600, noise: float = 0.05) -> Trace:
    return Trace(
        f"spike {base:g}->{peak:g} cores for {length}s",
        lambda t: peak if at <= t < at + length else base,
        duration,
        None,
        noise,
    )


def plateau(level: float, duration: int = 900, noise: float = 0.2, uniform: bool = False) -> Trace:
    kind = "uniform" if uniform else "gaussian"
    return Trace(f"plateau {level:g} cores, {kind} noise {noise:.0%}", lambda t: level, duration, None, noise, uniform)


def ramp(start: float, end: float, t0: int, t1: int, duration: int = 900, noise: float = 0.05) -> Trace:
    def demand(t: float) -> float:
        if t <= t0:
            return start
        if t >= t1:
            return end
        return start + (end - start) * (t - t0) / (t1 - t0)

    return Trace(f"ramp {start:g}->{end:g} cores over {t1 - t0}s", demand, duration, float(t0), noise)


@dataclass(frozen=True, slots=True)
class ScaleChange:
    t: float  # seconds since the trace began
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class RunResult:
    trace: str
    pipeline: str
    decisions: tuple[ScaleChange, ...]
    replicas_timeline: tuple[int, ...]  # replicas at the end of each second
    first_scale_up_latency: float | None  # seconds from trace.step_at to the first scale-up decision

    @property
    def flaps(self) -> int:
        """Direction reversals: a scale-down after a scale-up, or the other way round."""
        directions = [1 if d.after > d.before else -1 for d in self.decisions]
        return sum(1 for a, b in pairwise(directions) if a != b)

    @property
    def changes(self) -> int:
        return len(self.decisions)


@dataclass(slots=True)
class _Pod:
    name: str
    created: float
    ready_at: float
    counter_ns: int = 0


@dataclass(slots=True)
class _World:
    trace: Trace
    rng: random.Random
    startup: float
    pods: list[_Pod] = field(default_factory=list)
    serial: int = 0

    def resize(self, replicas: int, now: float) -> None:
        while len(self.pods) < replicas:
            self.pods.append(_Pod(f"web-{self.serial}", now, now + self.startup))
            self.serial += 1
        while len(self.pods) > replicas:
            self.pods.pop()

    def advance(self, t: float) -> None:
        """Run second (t, t + 1]: the ready pods share the demand."""
        ready = [p for p in self.pods if p.ready_at <= t]
        if not ready:
            return
        share = self.trace.demand(t) / len(ready)
        for p in ready:
            if not self.trace.noise:
                usage = share
            elif self.trace.uniform:
                usage = share * (1.0 + self.rng.uniform(-self.trace.noise, self.trace.noise))
            else:
                usage = max(0.0, share * (1.0 + self.rng.gauss(0.0, self.trace.noise)))
            p.counter_ns += round(usage * NS)

    def pod_infos(self, now: float) -> list[PodInfo]:
        out = []
        for p in self.pods:
            ready = p.ready_at <= now
            out.append(
                PodInfo(
                    p.name,
                    phase="Running",
                    ready="True" if ready else "False",
                    ready_transition=EPOCH + (p.ready_at if ready else p.created),
                    start_time=EPOCH + p.created,
                    containers=(ContainerInfo("app", {"cpu": 1000}),),
                )
            )
        return out


class _Reader:
    """A MetricsReader over per-pod CPU values."""

    def __init__(self, values: Mapping[str, PodMetric]) -> None:
        self.values = values

    def resource_metric(self, resource: str, container: str) -> Mapping[str, PodMetric]:
        if resource != "cpu":
            raise MetricError(f"no {resource} in the simulation")
        return self.values

    def pods_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> Mapping[str, PodMetric]:
        raise MetricError("no custom metrics in the simulation")

    def object_metric(
        self, name: str, described_object: Mapping[str, Any], metric_selector: Mapping[str, Any] | None
    ) -> tuple[int, float]:
        raise MetricError("no object metrics in the simulation")

    def external_metric(self, name: str, metric_selector: Mapping[str, Any] | None) -> tuple[list[int], float]:
        raise MetricError("no external metrics in the simulation")


def _hpa(target: int, min_replicas: int, max_replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "sim"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
                }
            ],
        },
        "status": {},
    }


def _window_metrics(window: SampleWindow, pods: list[_Pod], now: float, seconds: float) -> dict[str, PodMetric]:
    out = {}
    for p in pods:
        u = window.usage(p.name, EPOCH + now, seconds)
        if u is not None and u.cpu_cores is not None:
            out[p.name] = PodMetric(round(u.cpu_cores * 1000), u.timestamp, u.window)
    return out


def run(
    trace: Trace,
    pipeline: str,
    *,
    seed: int = 0,
    target: int = 50,
    initial: int | None = None,
    min_replicas: int = 1,
    max_replicas: int = 100,
    startup: float = 5.0,
    scrape_period: float = 60.0,
    sync_period: float = 15.0,
    fast: FastConfig | None = None,
) -> RunResult:
    """One trace through one pipeline ("upstream" or "fast")."""
    if pipeline not in ("upstream", "fast"):
        raise ValueError(f"pipeline must be 'upstream' or 'fast', got {pipeline!r}")
    rng = random.Random(seed)
    fast_config = fast or FastConfig()
    if initial is None:
        initial = max(min_replicas, math.ceil(trace.demand(0) * 100 / target))
    world = _World(trace, rng, startup)
    world.resize(initial, -10_000.0)  # long-running pods: ready and past their CPU initialization
    for p in world.pods:
        p.ready_at = p.created = -10_000.0
    hpa = _hpa(target, min_replicas, max_replicas)
    history = History()
    config = ControllerConfig()
    sync_phase = rng.randrange(int(sync_period)) if pipeline == "upstream" else 0
    scrape_phase = rng.randrange(int(scrape_period))
    window = SampleWindow(capacity=64)
    scraped: dict[str, list[tuple[float, int]]] = {}  # metrics-server: the last two scrapes per pod
    served: dict[str, PodMetric] = {}
    decisions: list[ScaleChange] = []
    timeline: list[int] = []
    replicas = initial
    for second in range(trace.duration):
        world.advance(float(second))
        now = float(second + 1)
        if pipeline == "fast":
            for p in world.pods:
                window.add(p.name, EPOCH + now, p.counter_ns, 0)
            live = {p.name for p in world.pods}
            for key in list(window.keys()):
                if key not in live:
                    window.remove(key)
        elif (second + 1 - scrape_phase) % int(scrape_period) == 0:
            for p in world.pods:
                history_ = scraped.setdefault(p.name, [])
                history_.append((now, p.counter_ns))
                del history_[:-2]
            scraped = {k: v for k, v in scraped.items() if k in {p.name for p in world.pods}}
            served = {}
            for name, pts in scraped.items():
                if len(pts) == 2:
                    (t0, c0), (t1, c1) = pts
                    served[name] = PodMetric(round((c1 - c0) / NS / (t1 - t0) * 1000), EPOCH + t1, t1 - t0)
        due = pipeline == "fast" or (second + 1 - sync_phase) % int(sync_period) == 0
        if due:
            pods = world.pod_infos(now)
            scale = Scale(replicas, len(world.pods), "app=web")
            if pipeline == "fast":
                quick = _Reader(_window_metrics(window, world.pods, now, fast_config.quick_metric_window))
                steady = _Reader(_window_metrics(window, world.pods, now, fast_config.steady_metric_window))
                out = reconcile(
                    hpa, scale, pods, steady, history, EPOCH + now, config, fast=FastMode(quick, fast_config)
                )
            else:
                current = {k: v for k, v in served.items() if k in {p.name for p in world.pods}}
                out = reconcile(hpa, scale, pods, _Reader(current), history, EPOCH + now, config)
            history = out.history
            hpa["status"] = out.status
            if out.rescale:
                decisions.append(ScaleChange(now, replicas, out.desired_replicas))
                replicas = out.desired_replicas
                world.resize(replicas, now)
        timeline.append(replicas)
    latency = None
    if trace.step_at is not None:
        first = next((d for d in decisions if d.after > d.before and d.t > trace.step_at), None)
        latency = None if first is None else first.t - trace.step_at
    return RunResult(trace.name, pipeline, tuple(decisions), tuple(timeline), latency)
