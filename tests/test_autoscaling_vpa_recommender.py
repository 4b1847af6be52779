"""VPA histograms, aggregation (CPU samples, memory peaks, OOM), checkpoints and the recommender's estimates."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.autoscaling.vpa.aggregate import (
    MIB,
    AggregateContainerState,
    AggregationsConfig,
    ContainerState,
    OOMTooOld,
)
from nodeagent.cluster.autoscaling.vpa.histogram import CheckpointError, DecayingHistogram, ExponentialBuckets
from nodeagent.cluster.autoscaling.vpa.recommender import RecommenderConfig, confidence, recommend, resource_list

DAY = 86400.0
T0 = 1_700_006_400.0  # a midnight (UTC): reference times round to it


# --- buckets ---------------------------------------------------------------------------------------


def test_exponential_buckets() -> None:
    b = ExponentialBuckets(100.0, 10.0, 2.0, 1e-4)
    assert b.count == 5  # starts 0, 10, 30, 70, 150
    assert [b.start(i) for i in range(5)] == [0.0, 10.0, 30.0, 70.0, 150.0]
    assert [b.find(v) for v in (0.0, 9.99, 10.0, 29.9, 30.0, 69.0, 70.0, 149.0, 10**9)] == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    with pytest.raises(IndexError):
        b.start(5)
    with pytest.raises(ValueError):
        ExponentialBuckets(100.0, 10.0, 1.0, 1e-4)


def test_upstream_bucket_schemes() -> None:
    cfg = AggregationsConfig()
    cpu, mem = cfg.cpu_buckets, cfg.memory_buckets
    assert (cpu.first, cpu.maximum, cpu.ratio) == (0.01, 1000.0, 1.05)
    assert (mem.first, mem.maximum, mem.ratio) == (1e7, 1e12, 1.05)
    assert cpu.count == mem.count == 176
    assert cpu.start(cpu.count - 1) >= 1000.0 > cpu.start(cpu.count - 2)


# --- histogram -------------------------------------------------------------------------------------


def hist(half_life: float = DAY) -> DecayingHistogram:
    return DecayingHistogram(ExponentialBuckets(100.0, 10.0, 2.0, 1e-4), half_life)


def test_empty_histogram() -> None:
    h = hist()
    assert h.is_empty() and h.percentile(0.5) == 0.0


def test_percentiles_return_bucket_ends() -> None:
    h = hist()
    for v in (5, 15, 15, 40):  # buckets 0, 1, 1, 2
        h.add(v, 1.0, T0)
    assert h.percentile(0.0) == 10.0  # the end of the first non-empty bucket
    assert h.percentile(0.25) == 10.0
    assert h.percentile(0.5) == 30.0
    assert h.percentile(0.75) == 30.0
    assert h.percentile(1.0) == 70.0
    h.add(1e6, 1.0, T0)  # the last bucket has no end: its start
    assert h.percentile(1.0) == 150.0


def test_decay_doubles_the_weight_of_a_sample_one_half_life_newer() -> None:
    h = hist(half_life=3600.0)
    h.add(5, 1.0, T0)
    h.add(40, 1.0, T0 + 3600.0)  # twice the weight of the first
    assert h.total == pytest.approx(3.0)
    assert h.percentile(0.33) == 10.0
    assert h.percentile(0.34) == 70.0


def test_decay_renormalizes_when_the_exponent_grows() -> None:
    h = hist(half_life=60.0)
    h.add(5, 1.0, T0)
    ref = h.reference
    h.add(5, 1.0, T0 + 60.0 * 150)  # past 2^100: the reference moves and old weights shrink
    assert h.reference is not None and ref is not None and h.reference > ref
    assert h.total == pytest.approx(1.0 + 2.0**-150 * 1.0, rel=1e-9) or h.total == pytest.approx(1.0)
    assert math.isfinite(h.total)


def test_subtract_and_empty_again() -> None:
    h = hist()
    h.add(40, 1.0, T0)
    h.subtract(40, 1.0, T0)
    assert h.is_empty() and h.total == 0.0


def test_checkpoint_round_trip() -> None:
    h = hist()
    for i, v in enumerate((5, 15, 15, 40, 40, 40)):
        h.add(v, 1.0, T0 + i)
    cp = h.to_checkpoint()
    assert cp["referenceTimestamp"] == "2023-11-15T00:00:00Z"
    assert max(cp["bucketWeights"].values()) == 10000
    assert json.loads(json.dumps(cp)) == cp  # plain JSON
    back = hist()
    back.load_checkpoint(cp)
    for p in (0.1, 0.3, 0.6, 0.9):  # away from the thresholds where a rounding could tip a bucket
        assert back.percentile(p) == h.percentile(p)
    assert back.total == pytest.approx(h.total)
    assert back.reference == h.reference


@pytest.mark.parametrize(
    ("cp", "message"),
    [
        ({"totalWeight": -1.0, "bucketWeights": {}}, "negative weight"),
        ({"totalWeight": 1.0, "bucketWeights": {"5": 1}}, "exceeding histogram buckets 5"),
        ({"totalWeight": 1.0, "bucketWeights": {"-1": 1}}, "negative bucket"),
        ({"totalWeight": 1.0, "bucketWeights": {"x": 1}}, "not an integer"),
        ({"totalWeight": 1.0, "bucketWeights": {"1": -3}}, "invalid weight"),
        ({"totalWeight": "a lot"}, "invalid totalWeight"),
        ({"totalWeight": 1.0, "referenceTimestamp": "yesterday"}, "invalid referenceTimestamp"),
    ],
)
def test_malformed_checkpoints_are_refused(cp: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(CheckpointError, match=message):
        hist().load_checkpoint(cp)


def test_checkpoint_load_drops_buckets_below_epsilon() -> None:
    """kubernetes/autoscaler#7726: a tiny bucket must not leave the histogram looking empty."""
    h = hist()
    h.load_checkpoint({"totalWeight": 2e-4, "bucketWeights": {"0": 1, "2": 10000}, "referenceTimestamp": None})
    assert not h.is_empty()
    assert h.percentile(0.5) == 70.0


# --- aggregation -----------------------------------------------------------------------------------


def test_cpu_samples_in_order_only() -> None:
    agg = AggregateContainerState()
    c = ContainerState(agg)
    assert c.add_cpu_sample(500, T0)
    assert not c.add_cpu_sample(700, T0)  # duplicate
    assert not c.add_cpu_sample(700, T0 - 60)  # older
    assert not c.add_cpu_sample(-1, T0 + 60)
    assert c.add_cpu_sample(700, T0 + 60)
    assert (agg.total_samples, agg.first_sample_start, agg.last_sample_start) == (2, T0, T0 + 60)
    assert agg.cpu.total == pytest.approx(0.1 + 0.1 * 2 ** (60 / DAY))  # weight 0.1, the newer one decayed up


def test_memory_keeps_one_peak_per_interval() -> None:
    agg = AggregateContainerState()
    c = ContainerState(agg)
    c.add_memory_sample(300 * MIB, T0)
    c.add_memory_sample(200 * MIB, T0 + 10)  # lower: ignored
    assert c.window_end == T0 + DAY and c.memory_peak == 300 * MIB
    c.add_memory_sample(400 * MIB, T0 + 20)  # higher: replaces the peak of this interval
    assert agg.memory.total == pytest.approx(1.0)  # one peak (stored at the interval's end), not two
    assert c.memory_peak == 400 * MIB
    c.add_memory_sample(100 * MIB, T0 + 3 * DAY + 5)  # three intervals later
    assert c.window_end == T0 + 4 * DAY and c.memory_peak == 100 * MIB
    assert not c.add_memory_sample(500 * MIB, T0 + DAY)  # older than the latest sample


def test_oom_bumps_memory() -> None:
    agg = AggregateContainerState()
    c = ContainerState(agg, memory_request=200 * MIB)
    c.add_memory_sample(150 * MIB, T0)
    c.record_oom(T0 + 60)
    assert c.oom_peak == 300 * MIB  # max(200 MiB + 100 MiB, 200 MiB * 1.2)
    c2 = ContainerState(AggregateContainerState(), memory_request=1000 * MIB)
    c2.record_oom(T0)
    assert c2.oom_peak == 1200 * MIB  # 20% beats 100 MiB above 500 MiB
    with pytest.raises(OOMTooOld, match="too old"):
        c.record_oom(T0 + 60 - 2 * DAY)


def test_aggregate_checkpoint_round_trip_and_version() -> None:
    agg = AggregateContainerState(created=T0)
    c = ContainerState(agg)
    for i in range(100):
        c.add_cpu_sample(200 + (i % 10) * 10, T0 + 60 * i)
        c.add_memory_sample((100 + i) * MIB, T0 + 60 * i)
    cp = agg.to_checkpoint(T0 + 6000)
    assert cp["version"] == "v3" and cp["totalSamplesCount"] == 100
    assert cp["firstSampleStart"] == "2023-11-15T00:00:00Z"
    back = AggregateContainerState.from_checkpoint(json.loads(json.dumps(cp)))
    assert back.total_samples == 100 and back.last_sample_start == agg.last_sample_start
    for p in (0.5, 0.9, 0.95):
        assert back.cpu.percentile(p) == agg.cpu.percentile(p)
        assert back.memory.percentile(p) == agg.memory.percentile(p)
    assert recommend({"app": back}) == recommend({"app": agg})
    with pytest.raises(CheckpointError, match="unsupported checkpoint version v2"):
        AggregateContainerState.from_checkpoint({**cp, "version": "v2"})


def test_expiry() -> None:
    agg = AggregateContainerState(created=T0)
    assert not agg.is_expired(T0 + 7 * DAY) and agg.is_expired(T0 + 8 * DAY)
    agg.add_cpu(100, T0 + DAY)
    assert not agg.is_expired(T0 + 8 * DAY) and agg.is_expired(T0 + 9 * DAY)


# --- the recommender -------------------------------------------------------------------------------


def steady(cpu_milli: int, mem_bytes: int, minutes: int, start: float = T0) -> AggregateContainerState:
    agg = AggregateContainerState(created=start)
    c = ContainerState(agg)
    for i in range(minutes):
        c.add_cpu_sample(cpu_milli, start + 60 * i)
        c.add_memory_sample(mem_bytes, start + 60 * i)
    return agg


def end_of_bucket(buckets: ExponentialBuckets, value: float) -> float:
    return buckets.start(buckets.find(value) + 1)


def test_target_bounds_and_confidence_after_a_day() -> None:
    agg = steady(1000, 1 << 30, 1441)  # a day of one sample a minute: confidence 1
    assert confidence(agg, DAY) == pytest.approx(1.0)
    est = recommend({"app": agg})["app"]
    cfg = AggregationsConfig()
    cpu_p = end_of_bucket(cfg.cpu_buckets, 1.0)  # every percentile is this bucket's end
    mem_p = end_of_bucket(cfg.memory_buckets, float(1 << 30))
    base_cpu = int(cpu_p * 1000)
    base_cpu += int(base_cpu * 0.15)
    base_mem = int(mem_p)
    base_mem += int(base_mem * 0.15)
    assert est.target == {"cpu": base_cpu, "memory": base_mem}
    assert est.upper_bound == {"cpu": int(base_cpu * 2.0), "memory": int(base_mem * 2.0)}  # (1 + 1/1)
    assert est.lower_bound == {"cpu": int(base_cpu * (1.001**-2)), "memory": int(base_mem * (1.001**-2))}


def test_no_history_means_an_unbounded_upper_and_a_minimum_lower_bound() -> None:
    agg = AggregateContainerState()
    ContainerState(agg).add_cpu_sample(100, T0)  # one sample: lifespan 0, confidence 0
    est = recommend({"app": agg})["app"]
    assert est.upper_bound["cpu"] == 10**14
    assert est.lower_bound["cpu"] == 25 and est.lower_bound["memory"] == 250 * MIB
    assert est.upper_bound["memory"] == 250 * MIB  # no memory sample: p95 is 0, only the minimum is left


def test_pod_minimums_are_split_across_containers() -> None:
    tiny = {name: steady(1, 1 * MIB, 60) for name in ("a", "b")}
    est = recommend(tiny)  # the estimates are 11m (the first bucket's end, 10m, +15%) and 11 MB
    assert {e.target["cpu"] for e in est.values()} == {12}  # 25m / 2, truncated
    assert {e.target["memory"] for e in est.values()} == {int(250 * MIB / 2)}
    assert {e.target["cpu"] for e in recommend({**tiny, "c": tiny["a"], "d": tiny["b"]}).values()} == {11}


def test_only_controlled_resources_are_reported() -> None:
    est = recommend({"app": steady(500, 256 * MIB, 120)}, controlled={"app": ("memory",)})["app"]
    assert set(est.target) == set(est.lower_bound) == set(est.upper_bound) == {"memory"}


def test_quantities_as_upstream_writes_them() -> None:
    assert resource_list({"cpu": 1150, "memory": 262144000}) == {"cpu": "1150m", "memory": "250Mi"}
    assert resource_list({"cpu": 2000, "memory": 1000}) == {"cpu": "2", "memory": "1k"}


def test_a_custom_config_is_used() -> None:
    agg = steady(1000, 1 << 30, 1441)
    loose = recommend({"app": agg}, RecommenderConfig(safety_margin=0.0))["app"]
    tight = recommend({"app": agg})["app"]
    assert loose.target["cpu"] < tight.target["cpu"]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8000), st.integers(1, 4000)), min_size=1, max_size=80),
    st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6),
)
def test_percentiles_are_monotonic_and_bounds_ordered(samples: list[tuple[int, int]], ps: list[float]) -> None:
    agg = AggregateContainerState()
    c = ContainerState(agg)
    t = T0
    for cpu, mem_mib in samples:
        t += 60
        c.add_cpu_sample(cpu, t)
        c.add_memory_sample(mem_mib * MIB, t)
    ordered = sorted(ps)
    values = [agg.cpu.percentile(p) for p in ordered]
    assert values == sorted(values)
    mem = [agg.memory.percentile(p) for p in ordered]
    assert mem == sorted(mem)
    est = recommend({"app": agg})["app"]
    for r in ("cpu", "memory"):
        assert est.lower_bound[r] <= est.target[r] <= est.upper_bound[r]


def test_a_server_restart_keeps_the_history() -> None:
    """Checkpoint after a day, restart (JSON round trip, fresh container states), go on: same recommendation
    as a server that never stopped, within one bucket (checkpoints keep weights as integers)."""
    cfg = AggregationsConfig()

    def feed(agg: AggregateContainerState, start: int, end: int) -> None:
        c = ContainerState(agg)
        for i in range(start, end):
            t = T0 + 60 * i
            c.add_cpu_sample(300 + (i % 50) * 10, t)
            c.add_memory_sample((300 + (i % 200)) * MIB, t)

    steady_server = AggregateContainerState(cfg, T0)
    feed(steady_server, 0, 2 * 1440)
    restarted = AggregateContainerState(cfg, T0)
    feed(restarted, 0, 1440)
    saved = json.dumps(restarted.to_checkpoint(T0 + DAY))
    restored = AggregateContainerState.from_checkpoint(json.loads(saved), cfg)
    feed(restored, 1440, 2 * 1440)
    a, b = recommend({"app": steady_server})["app"], recommend({"app": restored})["app"]
    for r in ("cpu", "memory"):
        assert abs(a.target[r] - b.target[r]) <= 0.06 * a.target[r]  # at most one 5% bucket apart
    assert restored.total_samples == steady_server.total_samples
    assert confidence(restored, DAY) == pytest.approx(confidence(steady_server, DAY))
