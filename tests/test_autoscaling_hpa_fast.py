"""Beyond upstream: the fast first reaction, on its normalizer's tables and on simulated load traces.

The traces run the real controller.reconcile (and the server's SampleWindow for the fast pipeline)
against upstream's pipeline (metrics-server every 60 s, HPA every 15 s, default behavior).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.cluster.autoscaling.hpa import simulate as sim
from nodeagent.cluster.autoscaling.hpa.fast import FastConfig, normalize_fast
from nodeagent.cluster.autoscaling.hpa.normalize import History, Recommendation
from nodeagent.cluster.autoscaling.hpa.spec import Behavior, ScalingPolicy, ScalingRules

NOW = 10_000.0
CFG = FastConfig()


def history(quick: list[tuple[int, float]] = (), steady: list[tuple[int, float]] = ()) -> History:  # type: ignore[assignment]
    return History(recommendations=tuple(Recommendation(r, NOW - a) for r, a in quick),
                   steady_recommendations=tuple(Recommendation(r, NOW - a) for r, a in steady))


@pytest.mark.parametrize(("case", "h", "quick", "steady", "expected", "able"), [
    ("quick: four seconds all asking for more -> the smallest of them", history([(8, 3), (9, 2), (8, 1)]), 10, 4, 8,
     "ScaleUpStabilized"),
    ("quick: one second of the four is back to normal -> no scale-up", history([(8, 3), (4, 2), (8, 1)]), 10, 4, 4,
     "ScaleUpStabilized"),
    ("quick: missed syncs, only three proposals in the window -> silent", history([(8, 2), (8, 1)]), 10, 4, 4,
     "ScaleUpStabilized"),
    ("steady: 30 s of steady proposals asking for more", history(steady=[(6, a) for a in range(1, 30)]), 4, 6, 6,
     "ReadyForNewScale"),
    ("steady: not yet 30 s of agreement", history(steady=[(6, a) for a in range(1, 20)]), 4, 6, 4, "ScaleUpStabilized"),
    ("down: the highest steady proposal of 300 s is the floor", history(steady=[(3, 250), (2, 10)]), 1, 1, 3,
     "ScaleDownStabilized"),
    ("down: once the higher one is older than 300 s", history(steady=[(3, 301), (2, 10)]), 1, 1, 2,
     "ScaleDownStabilized"),
    ("nothing to do", history([(4, 3), (4, 2), (4, 1)], [(4, 10)]), 4, 4, 4, "ReadyForNewScale"),
])
def test_normalize_fast(case: str, h: History, quick: int, steady: int, expected: int, able: str) -> None:
    n = normalize_fast(h, 4, quick, steady, 1, 100, None, NOW, CFG)
    assert (n.replicas, n.able_reason) == (expected, able), case


def test_the_default_rate_limits_still_apply() -> None:
    n = normalize_fast(history([(40, 3), (40, 2), (40, 1)]), 4, 40, 4, 1, 100, None, NOW, CFG)
    assert (n.replicas, n.limited_reason) == (8, "ScaleUpLimit")  # max(+4 pods, +100%) per 15 s


def test_an_hpa_behavior_with_longer_windows_wins() -> None:
    slow_up = Behavior(ScalingRules(10, "Max", (ScalingPolicy("Percent", 100, 15),)),
                       ScalingRules(600, "Max", (ScalingPolicy("Percent", 100, 15),)))
    n = normalize_fast(history([(8, 3), (8, 2), (8, 1)]), 4, 8, 4, 1, 100, slow_up, NOW, CFG)
    assert n.replicas == 4  # a 10 s scale-up window needs 10 proposals
    n = normalize_fast(history(steady=[(3, 500), (2, 10)]), 4, 1, 1, 1, 100, slow_up, NOW, CFG)
    assert n.replicas == 3  # a 600 s scale-down window keeps the proposal from 500 s ago


def test_fast_config_is_checked() -> None:
    with pytest.raises(ValueError, match="quick_window must be positive"):
        FastConfig(quick_window=0)
    with pytest.raises(ValueError, match="quick_tolerance must not be negative"):
        FastConfig(quick_tolerance=-0.1)


# --- the traces ----------------------------------------------------------------------------------

@pytest.mark.parametrize("at", [60, 67, 73])
def test_a_step_is_acted_on_within_5_s_fast_and_after_15_s_or_more_upstream(at: int) -> None:
    trace = sim.step(2.0, 6.0, at, duration=240)
    fast = sim.run(trace, "fast", seed=at)
    upstream = sim.run(trace, "upstream", seed=at)
    assert fast.first_scale_up_latency is not None and fast.first_scale_up_latency <= 5.0
    assert upstream.first_scale_up_latency is not None and upstream.first_scale_up_latency >= 15.0
    assert fast.flaps == 0 and upstream.flaps == 0
    assert fast.replicas_timeline[-1] == 12  # 6 cores at 50% of 1-core requests


def test_a_two_second_spike_scales_neither() -> None:
    trace = sim.spike(2.0, 8.0, 100, 2, duration=300)
    for pipeline in ("fast", "upstream"):
        assert sim.run(trace, pipeline, seed=1).changes == 0, pipeline


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_noisy_plateau_at_target_does_not_flap(seed: int) -> None:
    trace = sim.plateau(2.5, duration=600, noise=0.2)  # exactly at target: the worst case
    fast = sim.run(trace, "fast", seed=seed)
    assert fast.changes == 0 and fast.flaps == 0
    assert sim.run(trace, "upstream", seed=seed).changes == 0


def test_a_ramp_is_followed_earlier_than_upstream_without_flapping() -> None:
    trace = sim.ramp(1.0, 6.0, 60, 360, duration=600)
    fast = sim.run(trace, "fast", seed=5)
    upstream = sim.run(trace, "upstream", seed=5)
    assert fast.flaps == 0 and upstream.flaps == 0
    assert fast.first_scale_up_latency is not None and upstream.first_scale_up_latency is not None
    assert fast.first_scale_up_latency < upstream.first_scale_up_latency
    # replica-seconds below what the load needs (a measure of lag), fast well under upstream
    need = [max(1, -(-round(trace.demand(t) * 100) // 50)) for t in range(trace.duration)]

    def short(r: sim.RunResult) -> int:
        return sum(max(0, n - have) for n, have in zip(need, r.replicas_timeline, strict=True))

    assert short(fast) < short(upstream)


def test_pods_keep_going_after_load_drops_only_after_the_stabilization_window() -> None:
    trace = sim.Trace("drop", lambda t: 6.0 if t < 60 else 2.0, 500, None, 0.05)
    fast = sim.run(trace, "fast", seed=2, initial=12)
    downs = [d for d in fast.decisions if d.after < d.before]
    assert downs and downs[0].t >= 60 + 300  # upstream's 300 s scale-down stabilization
    assert fast.flaps == 0


def test_run_rejects_an_unknown_pipeline() -> None:
    with pytest.raises(ValueError, match="pipeline"):
        sim.run(sim.step(1, 2, 10, 20), "turbo")


@settings(max_examples=10, deadline=None)
@given(level=st.floats(0.5, 6.0), fraction=st.floats(0.5, 0.9), noise=st.floats(0.0, 0.15), seed=st.integers(0, 10**6))
def test_bounded_noise_below_target_never_flaps(level: float, fraction: float, noise: float, seed: int) -> None:
    """A plateau below target with per-pod noise bounded by 15% never makes the fast path reverse."""
    target = 50
    initial = max(1, -(-round(level * 100 / fraction) // target))  # pods sized so utilization is ~fraction
    trace = sim.plateau(level, duration=240, noise=noise, uniform=True)
    got = sim.run(trace, "fast", seed=seed, target=target, initial=initial)
    assert got.flaps == 0


@settings(max_examples=10, deadline=None)
@given(at=st.integers(30, 90), base=st.floats(0.5, 4.0), factor=st.floats(1.5, 4.0), seed=st.integers(0, 10**6))
def test_any_step_to_half_again_the_target_is_acted_on_within_5_s(at: int, base: float, factor: float,
                                                                  seed: int) -> None:
    """A step to `factor` x the target utilization of the pods running is acted on within 5 s.

    With per-pod noise bounded by 10% the quick proposals stay above 1.5 * 0.9 = 1.35 > 1.25 (the
    quick tolerance), so four seconds always agree. (Hypothesis found that with Gaussian 10% noise on
    a single pod, a step to exactly 1.5x can dip under the quick tolerance and take ~10 s.)
    """
    initial = max(1, -(-round(base * 100) // 50))
    high = factor * 0.5 * initial  # cores: factor x 50% of the current pods' 1-core requests
    trace = sim.step(base, high, at, duration=at + 20, noise=0.1, uniform=True)
    got = sim.run(trace, "fast", seed=seed, initial=initial)
    assert got.first_scale_up_latency is not None and got.first_scale_up_latency <= 5.0
