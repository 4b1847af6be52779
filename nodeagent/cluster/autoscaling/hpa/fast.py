"""Beyond upstream: a first reaction within 5 s of a load step on 1 s samples, without flapping.

Why upstream is slow: metrics-server scrapes every 60 s (15 s in recent releases) and reports each
pod's rate over that interval, and the HPA syncs every 15 s, so a step is acted on 15-75 s late.
Why simply syncing every second on short windows flaps: one-second samples are noisy, and a short
spike looks like a step.

The design keeps upstream's calculator, tolerance, rate policies and min/max, syncs every second,
and splits the evidence by speed:
- quick scale-up: the calculator on the last 1 s sample with a wider tolerance (25%); the HPA scales
  up only when every quick proposal of the last 4 s asks for more, and then to the smallest of them
  (upstream's scaleUp stabilization, on per-second proposals). So a step of more than 25% is acted
  on 4 s after it shows in the samples; a spike of 3 s or less never scales; per-second noise must
  exceed 25% four seconds running. With missed syncs (fewer than 4 proposals in the window) the
  quick path stays silent: no decision on one sample.
- steady scale-up: the calculator on a 30 s window with the HPA's own tolerance (10%), acted on when
  every steady proposal of the last 30 s asks for more. Small rises (10-25%) are caught within about
  a minute, as upstream catches them, and a spike is out of the 30 s window before it can scale.
- scale-down: the highest steady proposal of the stabilization window (upstream's 300 s) is the floor:
  scale-down is exactly as cautious as upstream's.
- then the HPA's behavior policies, or upstream's defaults for them (up: the larger of +4 pods and
  +100% per 15 s; down: 100% per 15 s), and min/max, unchanged.
An HPA's own behavior wins where it is stricter: a longer scaleUp or scaleDown window is kept.
Measured limits (bench/hpa_bench.py): with per-pod, per-second noise of 30% or more on a handful
of pods, the quick path sometimes takes a noise burst for a step (upstream's 60 s averages do not);
and a step only just beyond the quick tolerance can dip under it in noisy seconds and wait for four
agreeing ones (hypothesis found a 1.5x step on one pod with 10% Gaussian noise taking 10 s). A
noise-adaptive quick tolerance would be the next step. What it costs: a sync a second instead of
one per 15 s, on a sample window the server keeps anyway for kubectl top.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nodeagent.cluster.autoscaling.hpa.normalize import (
    READY_FOR_NEW_SCALE,
    History,
    Normalized,
    Recommendation,
    convert_with_behavior_rate,
)
from nodeagent.cluster.autoscaling.hpa.spec import Behavior, default_scale_down_rules, default_scale_up_rules


@dataclass(frozen=True, slots=True)
class FastConfig:
    sync_period: float = 1.0  # s between syncs (the agents sample every 1 s)
    quick_metric_window: float = 1.5  # s of samples, (now - 1.5, now]: the last 1 s interval of 1 s samples
    quick_window: float = 4.0  # s of quick proposals that must all ask for more
    quick_tolerance: float = 0.25  # the quick path reacts only to changes beyond this
    steady_metric_window: float = 30.5  # s of samples: the last 30 intervals
    steady_up_window: float = 30.0  # s of steady proposals that must all ask for more
    down_stabilization: float = 300.0  # s: the highest steady proposal in it is the floor

    def __post_init__(self) -> None:
        for name in ("sync_period", "quick_metric_window", "quick_window", "steady_metric_window"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("quick_tolerance", "steady_up_window", "down_stabilization"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")


DEFAULT_BEHAVIOR = Behavior(
    default_scale_up_rules(), replace(default_scale_down_rules(), stabilization_window_seconds=0)
)

SCALE_UP_STABILIZED = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
)
SCALE_DOWN_STABILIZED = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
)


def _needed(window: float, sync_period: float) -> int:
    """Proposals a full window holds at one per sync (window cut-offs are strict: (now - window, now])."""
    return max(1, math.floor(window / sync_period + 1e-9))


def normalize_fast(
    history: History,
    current: int,
    quick_desired: int,
    steady_desired: int,
    min_replicas: int,
    max_replicas: int,
    behavior: Behavior | None,
    now: float,
    config: FastConfig,
) -> Normalized:
    """The fast path's stabilization (see the module docstring), then the rate limits and min/max."""
    quick_window, steady_window, down_window = config.quick_window, config.steady_up_window, config.down_stabilization
    if behavior is not None:
        if behavior.scale_up.stabilization_window_seconds is not None:
            quick_window = max(quick_window, float(behavior.scale_up.stabilization_window_seconds))
            steady_window = max(steady_window, float(behavior.scale_up.stabilization_window_seconds))
        if behavior.scale_down.stabilization_window_seconds is not None:
            down_window = max(down_window, float(behavior.scale_down.stabilization_window_seconds))
    quick = (
        *(r for r in history.recommendations if r.timestamp > now - quick_window),
        Recommendation(quick_desired, now),
    )
    keep = max(steady_window, down_window)
    steady = (
        *(r for r in history.steady_recommendations if r.timestamp >= now - keep),
        Recommendation(steady_desired, now),
    )
    quick_floor = min(r.replicas for r in quick) if len(quick) >= _needed(quick_window, config.sync_period) else current
    steady_up = [r for r in steady if r.timestamp > now - steady_window]
    steady_floor = (
        min(r.replicas for r in steady_up) if len(steady_up) >= _needed(steady_window, config.sync_period) else current
    )
    down_ceiling = max(r.replicas for r in steady if r.timestamp >= now - down_window)
    up_target = max(quick_floor, steady_floor)
    raw = max(quick_desired, steady_desired) if max(quick_desired, steady_desired) > current else steady_desired
    if up_target > current:
        stabilized = up_target
    elif down_ceiling < current:
        stabilized = down_ceiling
    else:
        stabilized = current
    if stabilized == raw:
        able = READY_FOR_NEW_SCALE
    else:
        able = SCALE_UP_STABILIZED if raw > current else SCALE_DOWN_STABILIZED
    history = replace(history, recommendations=quick, steady_recommendations=steady)
    rules = behavior if behavior is not None else DEFAULT_BEHAVIOR
    replicas, reason, message = convert_with_behavior_rate(
        history, current, stabilized, min_replicas, max_replicas, rules, now
    )
    return Normalized(replicas, able[0], able[1], replicas != stabilized, reason, message, history)
