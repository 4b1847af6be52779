"""The sample window, CPU rates from cumulative counters, and the metrics.k8s.io objects kubectl top reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.autoscaling.metrics.objects import (
    Usage,
    cpu_quantity,
    memory_quantity,
    metrics_list,
    node_metrics,
    pod_metrics,
)
from nodeagent.cluster.autoscaling.metrics.rate import CounterSample, cpu_rate, cpu_rate_over
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow

S = 1_000_000_000  # one CPU second in ns


@pytest.mark.parametrize(("prev", "cur", "expected"), [
    (CounterSample(10.0, 0), CounterSample(11.0, S // 2), 0.5),  # half a core for a second
    (CounterSample(10.0, 4 * S), CounterSample(12.0, 8 * S), 2.0),  # two cores
    (CounterSample(10.0, S), CounterSample(11.0, S), 0.0),  # idle
    (CounterSample(10.0, S), CounterSample(10.0, 2 * S), None),  # same time: no interval
    (CounterSample(11.0, S), CounterSample(10.0, 2 * S), None),  # out of order
    (CounterSample(10.0, 5 * S), CounterSample(11.0, S), None),  # counter went down: restart
    (CounterSample(10.0, S, start_time=1.0), CounterSample(11.0, 3 * S, start_time=10.5), None),  # restarted, counter already past
    (CounterSample(10.0, S, start_time=1.0), CounterSample(11.0, 2 * S, start_time=1.0), 1.0),  # same container
    (CounterSample(10.0, 0), CounterSample(26.0, 16 * S), None),  # 16 s gap > 15 s
    (CounterSample(10.0, 0), CounterSample(25.0, 15 * S), 1.0),  # 15 s gap is still fine
])
def test_cpu_rate_table(prev: CounterSample, cur: CounterSample, expected: float | None) -> None:
    assert cpu_rate(prev, cur) == expected


def test_rate_over_samples_skips_the_reset_interval_only() -> None:
    samples = [CounterSample(0.0, 0), CounterSample(1.0, S), CounterSample(2.0, 2 * S),
               CounterSample(3.0, S // 10),  # restarted: this interval is dropped
               CounterSample(4.0, S // 10 + S)]
    cores, covered = cpu_rate_over(samples)  # type: ignore[misc]
    assert covered == 3.0
    assert cores == pytest.approx(1.0)
    assert cpu_rate_over([CounterSample(0.0, 0)]) is None


def test_window_rate_latest_memory_and_window_length() -> None:
    w = SampleWindow(capacity=8)
    for i in range(5):
        assert w.add("c", 100.0 + i, i * S // 4, 1000 + i)
    u = w.usage("c", now=104.0, window=10.0)
    assert u is not None
    assert u.cpu_cores == pytest.approx(0.25)
    assert u.memory_bytes == 1004
    assert u.timestamp == 104.0
    assert u.window == 4.0
    # a 2.5 s window keeps the samples at 102, 103, 104
    u = w.usage("c", now=104.0, window=2.5)
    assert u is not None and u.window == 2.0


def test_window_rejects_old_samples_and_wraps_around() -> None:
    w = SampleWindow(capacity=4)
    for i in range(10):
        w.add("c", float(i), i * S, 0)
    assert not w.add("c", 9.0, 20 * S, 0)  # not newer
    assert not w.add("c", 3.0, 20 * S, 0)
    assert [t for t, _, _ in w.samples("c")] == [6.0, 7.0, 8.0, 9.0]
    u = w.usage("c", now=9.0, window=100.0)
    assert u is not None and u.cpu_cores == pytest.approx(1.0) and u.window == 3.0


def test_window_restart_breaks_the_series() -> None:
    w = SampleWindow()
    w.add("c", 0.0, 10 * S, 0, start_time=1.0)
    w.add("c", 1.0, 11 * S, 0, start_time=1.0)
    w.add("c", 2.0, 12 * S, 0, start_time=1.5)  # new container instance, counter happens to be higher
    w.add("c", 3.0, 12 * S + S // 2, 0, start_time=1.5)
    u = w.usage("c", now=3.0, window=10.0)
    assert u is not None
    assert u.window == 2.0  # 0->1 and 2->3; 1->2 crosses the restart
    assert u.cpu_cores == pytest.approx(0.75)


def test_window_single_sample_has_memory_but_no_rate() -> None:
    w = SampleWindow()
    w.add(("ns", "p", "c"), 5.0, S, 4096)
    u = w.usage(("ns", "p", "c"), now=5.0, window=10.0)
    assert u is not None and u.cpu_cores is None and u.memory_bytes == 4096 and u.window == 0.0
    assert w.usage(("ns", "p", "c"), now=20.0, window=10.0) is None  # the sample left the window
    assert w.usage("absent", now=5.0, window=10.0) is None


def test_window_grows_and_reuses_removed_rows() -> None:
    w = SampleWindow(capacity=4, initial_series=2)
    for k in range(5):
        w.add(k, 1.0, 0, k)
    assert len(w) == 5
    rows = w.nbytes
    assert w.remove(3) and not w.remove(3)
    w.add("new", 1.0, 0, 7)
    assert w.nbytes == rows  # the freed row was reused
    assert w.samples(3) == [] and w.samples("new") == [(1.0, 0, 7)]
    assert set(w.keys()) == {0, 1, 2, 4, "new"}


def test_add_many_is_add_for_a_whole_report() -> None:
    one, many = SampleWindow(capacity=6), SampleWindow(capacity=6)
    keys = ["a", "b", "c"]
    for second in range(8):
        cpu = [second * S, second * S // 2, (second % 3) * S]  # "c" restarts every 3 s (counter drops)
        mem = [10, 20, 30 + second]
        for k, c, m in zip(keys, cpu, mem, strict=True):
            one.add(k, float(second), c, m, start_time=float(second // 4))
        kept = many.add_many(keys, float(second), cpu, mem, [float(second // 4)] * 3)
        assert kept == [True, True, True]
    assert many.add_many(["a", "new"], 3.0, [0, 0], [0, 0]) == [False, True]  # "a" has newer samples
    assert one.usage_all(7.0, 10.0) == {k: v for k, v in many.usage_all(7.0, 10.0).items() if k != "new"}
    assert [s[0] for s in many.samples("a")] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="twice"):
        many.add_many(["a", "a"], 9.0, [1, 2], [0, 0])
    with pytest.raises(ValueError, match="2 keys but 1 cpu"):
        many.add_many(["a", "b"], 9.0, [1], [0, 0])


def test_window_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SampleWindow(capacity=1)
    with pytest.raises(ValueError, match="must not be negative"):
        SampleWindow().add("c", 1.0, -1, 0)


samples_strategy = st.lists(
    st.tuples(st.floats(0.1, 3.0), st.integers(0, 3 * S), st.booleans(), st.integers(0, 2**40)),
    min_size=0, max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(samples_strategy, min_size=1, max_size=6), st.floats(1.0, 60.0), st.integers(4, 16))
def test_usage_all_agrees_with_the_pure_python_rate(series: list[list[tuple[float, int, bool, int]]],
                                                     window: float, capacity: int) -> None:
    """The vectorised path gives what rate.cpu_rate_over gives on the samples kept in the window."""
    w = SampleWindow(capacity=capacity, max_gap=2.5, initial_series=1)
    kept: dict[int, list[CounterSample]] = {}
    now = 0.0
    for key, steps in enumerate(series):
        t, counter, start = 0.0, 0, 0.0
        for dt, inc, restart, mem in steps:
            t += dt
            if restart:
                start, counter = t, inc  # a new container: its counter starts again
            else:
                counter += inc
            w.add(key, t, counter, mem, start_time=start)
            kept.setdefault(key, []).append(CounterSample(t, counter, start))
            now = max(now, t)
    got = w.usage_all(now, window)
    for key, all_samples in kept.items():
        recent = [s for s in all_samples[-capacity:] if now - window < s.timestamp <= now]
        if not recent:
            assert key not in got
            continue
        expected = cpu_rate_over(recent, max_gap=2.5)
        u = got[key]
        assert u == w.usage(key, now, window)
        if expected is None:
            assert u.cpu_cores is None
        else:
            assert u.cpu_cores == pytest.approx(expected[0])
            assert u.window == pytest.approx(expected[1])
        assert u.timestamp == recent[-1].timestamp


def test_quantities_as_metrics_server_writes_them() -> None:
    assert str(cpu_quantity(0.25)) == "250m"
    assert str(cpu_quantity(0.012345678)) == "12345678n"
    assert str(cpu_quantity(0.0)) == "0"
    assert str(memory_quantity(1 << 30)) == "1Gi"
    assert str(memory_quantity(1536 * 1024)) == "1536Ki"
    assert str(memory_quantity(1000)) == "1k"  # not a multiple of 1024: decimal, as apimachinery prints it


def test_node_and_pod_metrics_shapes() -> None:
    n = node_metrics("n1", Usage(0.25, 1 << 30), timestamp=1_700_000_000.0, window=20.0)
    assert n == {"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                 "metadata": {"name": "n1", "creationTimestamp": "2023-11-14T22:13:20Z"},
                 "timestamp": "2023-11-14T22:13:20Z", "window": "20s",
                 "usage": {"cpu": "250m", "memory": "1Gi"}}
    p = pod_metrics("web", "web-1", [("app", Usage(1.5, 64 << 20)), ("sidecar", Usage(0.001, 2 << 20))],
                    timestamp=1_700_000_000.0, window=1.5, labels={"app": "web"})
    assert p["metadata"] == {"name": "web-1", "namespace": "web", "creationTimestamp": "2023-11-14T22:13:20Z",
                             "labels": {"app": "web"}}
    assert p["window"] == "1.5s"
    assert p["containers"] == [{"name": "app", "usage": {"cpu": "1500m", "memory": "64Mi"}},
                               {"name": "sidecar", "usage": {"cpu": "1m", "memory": "2Mi"}}]
    lst = metrics_list("PodMetrics", [p])
    assert lst["kind"] == "PodMetricsList" and lst["items"] == [p]
    with pytest.raises(ValueError, match="kind"):
        metrics_list("Pod", [])
