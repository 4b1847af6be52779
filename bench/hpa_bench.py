"""HPA reaction on simulated load traces: upstream's pipeline against the fast first reaction.

Every run goes through the real controller (nodeagent.cluster.autoscaling.hpa.controller.reconcile)
in nodeagent.cluster.autoscaling.hpa.simulate: 1 s world steps, pods of 1-core requests at a 50%
target, 5 s pod startup. Pipelines:
  upstream-60s  metrics-server scraping every 60 s (the issue's figure), HPA sync 15 s, defaults
  upstream-15s  metrics-server scraping every 15 s (its current default), HPA sync 15 s, defaults
  fast          1 s samples in the server's SampleWindow, sync 1 s, hpa.fast
Traces (20 runs each: seeds, and the step time, vary; the schedules' phases are drawn per run):
  step     2 -> 6 cores (3x), Gaussian 5% per-pod noise
  spike    2 -> 8 cores for 2 s
  plateau  2.5 cores on 5 pods (exactly the target), Gaussian per-pod noise 20% (and 30%, 40%)
  ramp     1 -> 6 cores over 300 s
Figures: first scale-up decision after the load rises (p50/p99 over the runs, seconds), flaps
(direction reversals, summed over the runs), replica changes, and the cost of a sync.

Then the same through the server's own loop (controllers/manager/horizontal.py over an in-process
registry, a fake clock and the SampleWindow the scrape fills): a 3x step's first scale-up
(upstream's 15 s scrape and 15 s sync, against the fast mode's 1 s samples and syncs), and the CPU
of one sync round over `--hpas` HPAs of hollow pods (scale read and status through the registry).

    .venv/bin/python bench/hpa_bench.py [--runs 20] [--hpas 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from collections.abc import Callable

import structlog

from nodeagent.cluster.autoscaling.hpa import simulate as sim
from nodeagent.cluster.autoscaling.hpa.controller import FastMode, Scale, reconcile
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.hpa.source import container_key
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.controllers.manager.horizontal import HorizontalSettings
from nodeagent.cluster.controllers.manager.manager import ControllerManager
from nodeagent.cluster.controlplane import RegistryClient, plugins
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.registry.registry import Registry
from nodeagent.cluster.storage.memory import MemoryStore
from nodeagent.core.clock import FakeClock
from nodeagent.core.timefmt import rfc3339
from nodeagent.daemonkit.logsetup import configure_logging

PIPELINES: dict[str, dict[str, object]] = {
    "upstream-60s": {"pipeline": "upstream", "scrape_period": 60.0},
    "upstream-15s": {"pipeline": "upstream", "scrape_period": 15.0},
    "fast": {"pipeline": "fast"},
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def runs(make: Callable[[int], sim.Trace], n: int, **kw: object) -> list[sim.RunResult]:
    pipeline = str(kw.pop("pipeline"))
    return [sim.run(make(i), pipeline, seed=1000 + i, **kw) for i in range(n)]  # type: ignore[arg-type]


def report(name: str, make: Callable[[int], sim.Trace], n: int) -> None:
    print(f"\n{name}")
    header = ("pipeline", "latency p50", "p99", "missed", "flaps", "changes", "final")
    print(f"  {header[0]:14s} " + " ".join(f"{h:>{w}s}" for h, w in zip(header[1:], (11, 6, 6, 6, 8, 7), strict=True)))
    for label, kw in PIPELINES.items():
        results = runs(make, n, **dict(kw))
        lat = [r.first_scale_up_latency for r in results if r.first_scale_up_latency is not None]
        missed = sum(1 for r in results if r.first_scale_up_latency is None)
        p50 = f"{percentile(lat, 50):.0f}s" if lat else "-"
        p99 = f"{percentile(lat, 99):.0f}s" if lat else "-"
        finals = sorted({r.replicas_timeline[-1] for r in results})
        final = f"{finals[0]}" if len(finals) == 1 else f"{finals[0]}-{finals[-1]}"
        flaps = sum(r.flaps for r in results)
        changes = sum(r.changes for r in results)
        if make(0).step_at is None:
            p50 = p99 = "n/a"
            missed_text = "n/a"
        else:
            missed_text = str(missed)
        print(f"  {label:14s} {p50:>11s} {p99:>6s} {missed_text:>6s} {flaps:>6d} {changes:>8d} {final:>7s}")


class _Reader:
    def __init__(self, values: dict[str, PodMetric]) -> None:
        self.values = values

    def resource_metric(self, resource: str, container: str) -> dict[str, PodMetric]:
        return self.values

    def pods_metric(self, name: str, metric_selector: object) -> dict[str, PodMetric]:
        raise NotImplementedError

    def object_metric(self, name: str, described_object: object, metric_selector: object) -> tuple[int, float]:
        raise NotImplementedError

    def external_metric(self, name: str, metric_selector: object) -> tuple[list[int], float]:
        raise NotImplementedError


def sync_cost(hpas: int, pods_per_hpa: int) -> None:
    """CPU of one sync over `hpas` HPAs of hollow pods (no I/O: the controller step alone)."""
    now = sim.EPOCH + 100_000.0
    pods = [
        PodInfo(
            f"p{i}",
            ready="True",
            ready_transition=now - 3600,
            start_time=now - 3600,
            containers=(ContainerInfo("app", {"cpu": 1000}),),
        )
        for i in range(pods_per_hpa)
    ]
    metrics = {p.name: PodMetric(450 + (i % 7) * 10, now, 30.0) for i, p in enumerate(pods)}
    reader = _Reader(metrics)
    objects = [
        {
            "metadata": {"name": f"h{i}", "namespace": "bench"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": f"d{i}"},
                "minReplicas": 1,
                "maxReplicas": 50,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                    }
                ],
            },
            "status": {},
        }
        for i in range(hpas)
    ]
    histories = [History() for _ in range(hpas)]
    scale = Scale(pods_per_hpa, pods_per_hpa, "app=x")
    for label, fast, period in (("upstream (15 s sync)", None, 15.0), ("fast (1 s sync)", FastMode(reader), 1.0)):
        for warm in range(3):  # fill the windows first
            for i, obj in enumerate(objects):
                out = reconcile(obj, scale, pods, reader, histories[i], now + warm, fast=fast)
                histories[i] = out.history
        t0 = time.process_time()
        rounds = 3
        for r in range(rounds):
            for i, obj in enumerate(objects):
                out = reconcile(obj, scale, pods, reader, histories[i], now + 10 + r, fast=fast)
                histories[i] = out.history
        per_sync = (time.process_time() - t0) / rounds
        print(
            f"  {label:22s} {hpas} HPAs x {pods_per_hpa} pods: {per_sync * 1000:7.1f} ms CPU per sync, "
            f"{per_sync / hpas * 1e6:6.0f} µs per HPA, {100 * per_sync / period:5.1f}% of one core"
        )


class LoopWorld:
    """Deployments with hollow pods (fed to the informer, 500m requested each), their HPAs (cpu at 50%)
    and the sample window, around the server's HPA loop on a fake clock."""

    def __init__(self, settings: HorizontalSettings, capacity: int) -> None:
        self.clock = FakeClock()
        self.reg = Registry(MemoryStore(), self.clock, plugins=plugins(self.clock))
        self.client = RegistryClient(self.reg)
        self.window = SampleWindow(capacity=capacity, max_gap=settings.metric_window + 2.0, initial_series=4096)
        self.mgr = ControllerManager(self.client, self.clock, enabled=["horizontalpodautoscaling"],
                                     metrics=self.window, hpa=settings)
        self.pods: dict[str, list[str]] = {}  # deployment -> its pods
        self.counters: dict[str, int] = {}

    async def start(self) -> None:
        await self.reg.ensure_system_namespaces()
        await self.client.resource("v1", "Namespace").create("", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": "bench"}})

    async def add(self, name: str, replicas: int) -> None:
        spec = {"containers": [{"name": "app", "image": "x", "command": ["sleep", "1"],
                                "resources": {"requests": {"cpu": "500m"}}}]}
        await self.client.resource("apps/v1", "Deployment").create("bench", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "bench"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
        hpa = await self.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").create("bench", {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": "bench"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": 50,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 50}}}]}})
        self.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("ADDED", hpa)
        self.pods[name] = []
        self.resize(name, replicas)

    def resize(self, name: str, replicas: int) -> None:
        informer, pods = self.mgr.informer("v1", "Pod"), self.pods[name]
        long_ago = rfc3339(self.clock.wall() - 3600)
        while len(pods) < replicas:
            pod = f"{name}-{len(pods)}"
            informer.apply("ADDED", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "bench", "labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
                "status": {"phase": "Running", "startTime": long_ago,
                           "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": long_ago}]}})
            pods.append(pod)

    def sample(self, cores: Callable[[str], float], seconds: float = 1.0) -> None:
        """`seconds` of usage (each deployment's demand, shared by its pods) ending now, as one scrape."""
        keys, counts = [], []
        for name, pods in self.pods.items():
            share = cores(name) / len(pods)
            for p in pods:
                self.counters[p] = self.counters.get(p, 0) + round(share * seconds * 1e9)
                keys.append(container_key("bench", p, "app"))
                counts.append(self.counters[p])
        self.window.add_many(keys, self.clock.wall(), counts, [64 << 20] * len(keys))

    async def sync(self, name: str) -> int:
        await self.mgr.horizontal.sync(f"bench/{name}")
        hpa = await self.client.resource("autoscaling/v2", "HorizontalPodAutoscaler").get("bench", name)
        self.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("MODIFIED", hpa)
        replicas: int = (await self.client.get_scale("apps/v1", "Deployment", "bench", name))["spec"]["replicas"]
        self.resize(name, replicas)
        return replicas

    async def relist(self) -> None:
        listed = await self.reg.resource("autoscaling", "v2", "horizontalpodautoscalers").list("bench", ListOptions())
        for hpa in listed.items:
            self.mgr.informer("autoscaling/v2", "HorizontalPodAutoscaler").apply("MODIFIED", hpa)

    async def close(self) -> None:
        await self.reg.close()
        await self.reg.store.close()


async def loop_step_latency(fast: bool, seed: int) -> float | None:
    """A 3x step (0.5 -> 1.5 cores on 2 pods of 500m requests, at a 50% target) through the server's
    loop; seconds from the step to the first scale-up. Upstream: a scrape every 15 s, a sync every
    15 s, their phases and the step's second drawn per run."""
    rng = random.Random(seed)
    settings = HorizontalSettings(fast=FastConfig()) if fast else HorizontalSettings()
    world = LoopWorld(settings, 40 if fast else 8)
    await world.start()
    await world.add("web", 2)
    scrape, sync = (1, 1) if fast else (15, 15)
    scrape_phase, sync_phase = rng.randrange(scrape), rng.randrange(sync)
    step = 60 + rng.randrange(15)
    try:
        for t in range(1, 180):
            world.clock.advance(1.0)
            if t % scrape == scrape_phase:
                world.sample(lambda _n, t=t: 1.5 if t > step else 0.5, float(scrape))
            if t % sync == sync_phase and await world.sync("web") > 2:
                return float(t - step)
        return None
    finally:
        await world.close()


async def loop_figures(runs_n: int, hpas: int) -> None:
    # the loop's info logs rendered as in production (JSON), into /dev/null
    configure_logging("info", "json")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=open(os.devnull, "w")))  # noqa: SIM115
    print("\nthe server's HPA loop (registry, informers, sample window; fake clock)")
    for fast in (False, True):
        lat = [x for i in range(runs_n) if (x := await loop_step_latency(fast, 2000 + i)) is not None]
        label = "fast (1 s samples, 1 s sync)" if fast else "upstream (15 s scrape, 15 s sync)"
        if lat:
            print(f"  3x step, first scale-up, {label:34s} p50 {percentile(lat, 50):4.0f} s  p99 "
                  f"{percentile(lat, 99):4.0f} s  ({len(lat)}/{runs_n} runs)")
        else:
            print(f"  3x step, first scale-up, {label:34s} no scale-up in {runs_n} runs")
    await loop_cost(hpas, fast=False)
    await loop_cost(hpas, fast=True)


async def loop_cost(hpas: int, fast: bool) -> None:
    """CPU of one round of syncs over `hpas` HPAs of 3 hollow pods each, usage on target (no rescale):
    upstream's every 15 s over 15 s scrapes, or the fast mode's every second over 1 s samples."""
    settings = HorizontalSettings(fast=FastConfig()) if fast else HorizontalSettings()
    period = settings.period
    world = LoopWorld(settings, 40 if fast else 8)
    await world.start()
    t0 = time.perf_counter()
    for i in range(hpas):
        await world.add(f"d{i}", 3)
    made = time.perf_counter() - t0
    names = list(world.pods)
    for _ in range(32 if fast else 1):  # fill the windows the syncs read
        world.clock.advance(period)
        world.sample(lambda _n: 0.75, period)
    cost: list[float] = []
    for _ in range(4):
        world.clock.advance(period)
        world.sample(lambda _n: 0.75, period)
        c0 = time.process_time()
        for name in names:
            await world.mgr.horizontal.sync(f"bench/{name}")
        cost.append(time.process_time() - c0)
        await world.relist()  # what the watch feeds the informer meanwhile: the status writes
    await world.close()
    steady = statistics.mean(cost[1:])  # the first round writes every status; then nothing changes
    label = "fast (1 s sync)" if fast else "upstream (15 s sync)"
    print(f"  {label:20s} round over {hpas} HPAs x 3 hollow pods ({made:.1f} s to create them): first "
          f"{cost[0] * 1000:.0f} ms CPU (status writes), then {steady * 1000:.0f} ms, {steady / hpas * 1e6:.0f} µs "
          f"per HPA, {100 * steady / period:.1f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hpas", type=int, default=1000)
    args = parser.parse_args()
    n = args.runs
    print(f"HPA on simulated traces ({n} runs each; latency = first scale-up decision after the rise)")
    t0 = time.perf_counter()
    report("step 2 -> 6 cores (3x) at t = 120..139 s", lambda i: sim.step(2.0, 6.0, 120 + i, duration=420), n)
    report(
        "spike 2 -> 8 cores for 2 s (any change is a false reaction)",
        lambda i: sim.spike(2.0, 8.0, 120, 2, duration=420),
        n,
    )
    for noise in (0.2, 0.3, 0.4):
        report(
            f"noisy plateau at target, 2.5 cores on 5 pods, Gaussian per-pod noise {noise:.0%}, 1800 s",
            lambda i, noise=noise: sim.plateau(2.5, duration=1800, noise=noise),
            n,
        )
    report("ramp 1 -> 6 cores from t = 60 s over 300 s", lambda i: sim.ramp(1.0, 6.0, 60, 360, duration=600), n)
    print(f"\n(simulation wall time {time.perf_counter() - t0:.0f} s)")
    print("\nsync cost")
    sync_cost(args.hpas, 10)
    lat_up = [
        r.first_scale_up_latency
        for r in runs(lambda i: sim.step(2.0, 6.0, 120 + i, duration=300), n, pipeline="upstream")
        if r.first_scale_up_latency is not None
    ]
    print(f"\nupstream-60s step latency mean {statistics.mean(lat_up):.1f} s (for the note)")
    asyncio.run(loop_figures(n, args.hpas))


if __name__ == "__main__":
    main()
