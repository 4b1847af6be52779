"""The VPA recommender's estimates, as vertical-pod-autoscaler/pkg/recommender/logic.

Per container name, from its AggregateContainerState:
    target      = max(p90(histogram) * 1.15,                               pod minimum / containers)
    lowerBound  = max(p50 * 1.15 * (1 + 0.001 / confidence)^-2,            pod minimum / containers)
    upperBound  = max(p95 * 1.15 * (1 + 1 / confidence),                    pod minimum / containers)
for CPU and for memory (memory histograms hold the per-interval peaks). confidence = min(days
between the first and last sample, samples / 1440): one sample a minute for N days gives N, so the
upper bound is x3 after 12 h, x2 after a day, x1.14 after a week, and the lower bound x0.6 after
5 min, x0.95 after an hour; with no history the upper bound is unbounded and the lower bound zero.
The pod minimums (25 millicores, 250 MiB) are split evenly over the containers recommended.
Only the controlled resources (default cpu and memory) are reported.

status.recommendation then lists the containers sorted by name with target, lowerBound, upperBound
(capped by the resource policy, vpa.policy) and uncappedTarget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.cluster.autoscaling.vpa.aggregate import MIB, AggregateContainerState, amount, scale
from nodeagent.core.quantity import Quantity

DEFAULT_CONTROLLED = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class RecommenderConfig:
    """vpa-recommender's flags (recommender/config/config.go defaults)."""

    safety_margin: float = 0.15
    pod_min_cpu_millicores: float = 25.0
    pod_min_memory_mb: float = 250.0
    target_cpu_percentile: float = 0.9
    lower_cpu_percentile: float = 0.5
    upper_cpu_percentile: float = 0.95
    target_memory_percentile: float = 0.9
    lower_memory_percentile: float = 0.5
    upper_memory_percentile: float = 0.95
    confidence_interval_cpu: float = 86400.0
    confidence_interval_memory: float = 86400.0


@dataclass(frozen=True, slots=True)
class Estimate:
    """Amounts per resource: "cpu" in millicores, "memory" in bytes."""

    target: Mapping[str, int]
    lower_bound: Mapping[str, int]
    upper_bound: Mapping[str, int]


def confidence(state: AggregateContainerState, interval: float) -> float:
    """getConfidence: min(lifespan in intervals, samples / minutes per interval)."""
    if state.first_sample_start is None or state.last_sample_start is None:
        lifespan = 0.0
    else:
        lifespan = (state.last_sample_start - state.first_sample_start) / interval
    return min(lifespan, state.total_samples / (interval / 60.0))


def _with_confidence(base: int, multiplier: float, exponent: float, conf: float) -> int:
    factor = math.inf if conf == 0 else (1.0 + multiplier / conf) ** exponent
    if conf == 0 and exponent < 0:
        factor = 0.0
    if factor == math.inf:
        return amount(math.inf) if base > 0 else 0  # 0 * inf: NaN upstream, lifted by the minimum
    return scale(base, factor)


def _estimate_one(state: AggregateContainerState, cfg: RecommenderConfig, min_cpu: int, min_memory: int) -> Estimate:
    margin = cfg.safety_margin

    def cpu(p: float) -> int:
        base = amount(state.cpu.percentile(p) * 1000.0)
        return base + scale(base, margin)

    def memory(p: float) -> int:
        base = amount(state.memory.percentile(p))
        return base + scale(base, margin)

    conf_cpu = confidence(state, cfg.confidence_interval_cpu)
    conf_mem = confidence(state, cfg.confidence_interval_memory)
    target = {
        "cpu": max(cpu(cfg.target_cpu_percentile), min_cpu),
        "memory": max(memory(cfg.target_memory_percentile), min_memory),
    }
    lower = {
        "cpu": max(_with_confidence(cpu(cfg.lower_cpu_percentile), 0.001, -2.0, conf_cpu), min_cpu),
        "memory": max(_with_confidence(memory(cfg.lower_memory_percentile), 0.001, -2.0, conf_mem), min_memory),
    }
    upper = {
        "cpu": max(_with_confidence(cpu(cfg.upper_cpu_percentile), 1.0, 1.0, conf_cpu), min_cpu),
        "memory": max(_with_confidence(memory(cfg.upper_memory_percentile), 1.0, 1.0, conf_mem), min_memory),
    }
    return Estimate(target, lower, upper)


def recommend(
    states: Mapping[str, AggregateContainerState],
    config: RecommenderConfig = RecommenderConfig(),
    controlled: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Estimate]:
    """GetRecommendedPodResources: one Estimate per container name, controlled resources only.

    `states` holds the containers whose scaling mode is not Off (vpa.policy.recommended_states).
    """
    if not states:
        return {}
    fraction = 1.0 / len(states)
    min_cpu = scale(amount(config.pod_min_cpu_millicores * 0.001 * 1000.0), fraction)
    min_memory = scale(amount(config.pod_min_memory_mb * MIB), fraction)
    out = {}
    for name, state in states.items():
        est = _estimate_one(state, config, min_cpu, min_memory)
        keep = tuple((controlled or {}).get(name, DEFAULT_CONTROLLED))
        out[name] = Estimate(
            {r: v for r, v in est.target.items() if r in keep},
            {r: v for r, v in est.lower_bound.items() if r in keep},
            {r: v for r, v in est.upper_bound.items() if r in keep},
        )
    return out


def quantity(resource: str, value: int) -> Quantity:
    """QuantityFromCPUAmount (millicores) / QuantityFromMemoryAmount (bytes, BinarySI)."""
    if resource == "cpu":
        return Quantity.from_milli(value)
    return Quantity.from_value(value, "BinarySI")


def resource_list(values: Mapping[str, int]) -> dict[str, str]:
    return {r: str(quantity(r, v)) for r, v in sorted(values.items())}
