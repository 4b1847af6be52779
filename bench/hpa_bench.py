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

    .venv/bin/python bench/hpa_bench.py [--runs 20] [--hpas 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from nodeagent.cluster.autoscaling.hpa import simulate as sim
from nodeagent.cluster.autoscaling.hpa.controller import FastMode, Scale, reconcile
from nodeagent.cluster.autoscaling.hpa.normalize import History
from nodeagent.cluster.autoscaling.hpa.pods import ContainerInfo, PodInfo, PodMetric

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


if __name__ == "__main__":
    main()
