"""The server's sample window at 10,000 pods: memory, one second of samples in, rates out.

Series: each pod has a pod-level series and `--containers` container series (30,000 series for
10,000 pods with 2 containers), `--capacity` samples each (32: 31 s of 1 s samples). Figures:
  memory        the sample arrays (SampleWindow.nbytes) and the whole process growth (tracemalloc)
  ingest        one sample to every series, one add() at a time and with add_many() per agent
                report (`--per-node` pods a report): what one second of samples costs the server
  usage_all     every series' CPU rate and working set over a 30 s window, vectorised
  usage x N     the same, one series at a time through usage()
  deque         the same work on a dict of collections.deque of tuples, for comparison
Nothing is asserted; the figures are for the note.

    .venv/bin/python bench/metrics_bench.py [--pods 10000] [--containers 2] [--capacity 32] [--per-node 100]
"""

from __future__ import annotations

import argparse
import collections
import time
import tracemalloc

from nodeagent.cluster.autoscaling.metrics.rate import CounterSample, cpu_rate_over
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow

NS = 1_000_000_000


def keys(pods: int, containers: int) -> list[tuple[str, str, str]]:
    out = []
    for p in range(pods):
        out.append(("bench", f"pod-{p}", ""))
        out.extend(("bench", f"pod-{p}", f"c{c}") for c in range(containers))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--containers", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--per-node", type=int, default=100)
    args = parser.parse_args()
    series = keys(args.pods, args.containers)
    n = len(series)
    print(f"{args.pods} pods, {n} series, {args.capacity} samples a series")

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    window = SampleWindow(capacity=args.capacity, initial_series=n)
    counters = dict.fromkeys(series, 0)
    t = 1_700_000_000.0
    per_report = args.per_node * (1 + args.containers)
    reports = [series[i : i + per_report] for i in range(0, n, per_report)]
    batched = []
    memory_values = [[64 << 20] * len(r) for r in reports]
    for second in range(args.capacity - 1):
        values = [[(second + 1) * 250_000_000] * len(r) for r in reports]  # the reports, decoded
        t0 = time.perf_counter()
        for report, cpu, mem in zip(reports, values, memory_values, strict=True):
            window.add_many(report, t + second, cpu, mem)
        batched.append(time.perf_counter() - t0)
    for k in series:
        counters[k] = (args.capacity - 1) * 250_000_000
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    single = []
    second = args.capacity - 1
    t0 = time.perf_counter()
    for k in series:
        counters[k] += 250_000_000
        window.add(k, t + second, counters[k], 64 << 20)
    single.append(time.perf_counter() - t0)
    now = t + args.capacity - 1
    print(
        f"  memory: arrays {window.nbytes / 2**20:.1f} MiB, process growth {(after - before) / 2**20:.1f} MiB "
        f"({(after - before) / args.pods:.0f} bytes a pod)"
    )
    print(
        f"  ingest, add_many per report of {per_report} series: {min(batched) * 1000:.1f} ms for one sample of "
        f"every series ({min(batched) / n * 1e6:.2f} µs a sample, {100 * min(batched):.1f}% of a core at 1 s)"
    )
    print(f"  ingest, add() one at a time: {single[0] * 1000:.1f} ms ({single[0] / n * 1e6:.2f} µs a sample)")

    timings = []
    for _ in range(5):  # the best of five: the machine is shared
        t0 = time.perf_counter()
        usage = window.usage_all(now, 30.5)
        timings.append(time.perf_counter() - t0)
    vec = min(timings)
    sample = next(iter(usage.values()))
    print(
        f"  usage_all over 30 s: {vec * 1000:.1f} ms for {len(usage)} series "
        f"(cpu {sample.cpu_cores:.3f} cores over {sample.window:.0f} s)"
    )
    probe = series[: min(n, 10_000)]
    t0 = time.perf_counter()
    for k in probe:
        window.usage(k, now, 30.5)
    one = (time.perf_counter() - t0) / len(probe)
    print(f"  usage() one series at a time: {one * 1e6:.1f} µs a series ({one * n * 1000:.0f} ms for all)")

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    deques: dict[tuple[str, str, str], collections.deque[tuple[float, int, int]]] = {
        k: collections.deque(maxlen=args.capacity) for k in series
    }
    base = dict.fromkeys(series, 0)
    dq_ingest = []
    for second in range(args.capacity):
        t0 = time.perf_counter()
        for k in series:
            base[k] += 250_000_000
            deques[k].append((t + second, base[k], 64 << 20))
        dq_ingest.append(time.perf_counter() - t0)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    t0 = time.perf_counter()
    for k in series:
        cpu_rate_over([CounterSample(ts, c) for ts, c, _ in deques[k] if ts > now - 30.5])
    dq_usage = time.perf_counter() - t0
    print(
        f"  deque baseline: memory {(after - before) / 2**20:.1f} MiB, ingest {min(dq_ingest) * 1000:.1f} ms, "
        f"rates for all {dq_usage * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
