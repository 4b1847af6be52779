"""What the VPA recommender remembers of a container: its usage histograms and their checkpoint.

As vertical-pod-autoscaler/pkg/recommender/model (aggregations_config.go, container.go,
aggregate_container_state.go):
- CPU: every sample (cores) goes into a decaying histogram with weight 0.1 (minSampleWeight;
  request-based weighting was dropped upstream), buckets 0.01 .. 1000 cores growing 5%, half-life
  24 h. Samples must come in order; a duplicate or older one is dropped.
- memory: one peak per 24 h interval per container instance, weight 1.0, buckets 10 MB .. 1 TB,
  half-life 24 h. Within an interval a higher sample replaces the interval's peak (the old peak is
  subtracted, the new one added, both at the interval's end); a sample past the interval moves it
  on (by whole intervals). History is kept 8 intervals (8 days).
- an OOM kill adds an artificial memory sample: max(used + 100 MiB, used * 1.2), used = max(the
  memory request, the interval's peak); an OOM older than an interval before the latest sample is
  discarded.
- the checkpoint (VerticalPodAutoscalerCheckpointStatus, version "v3") carries both histograms,
  the first and last sample start and the sample count, so a server restart keeps the history.

Amounts are upstream's ResourceAmount: CPU in millicores, memory in bytes, integers in [0, 1e14].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.autoscaling.vpa.histogram import CheckpointError, DecayingHistogram, ExponentialBuckets
from nodeagent.core.timefmt import parse_rfc3339, rfc3339

MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT
MAX_RESOURCE_AMOUNT = 10**14
CHECKPOINT_VERSION = "v3"
DAY = 86400.0
MIB = 1024 * 1024


def amount(x: float) -> int:
    """resourceAmountFromFloat: truncated, within [0, 1e14]."""
    if x != x:  # NaN (0 * inf): Go's conversion gives a minimum, which the min-resource step lifts
        return 0
    if x > MAX_RESOURCE_AMOUNT:
        return MAX_RESOURCE_AMOUNT
    if x < 0:
        return 0
    return int(x)


def scale(value: int, factor: float) -> int:
    """ScaleResource."""
    return amount(value * factor)


@dataclass(frozen=True, slots=True)
class AggregationsConfig:
    memory_interval: float = DAY
    memory_interval_count: int = 8
    cpu_half_life: float = DAY
    memory_half_life: float = DAY
    oom_bump_ratio: float = 1.2
    oom_min_bump: float = 100 * MIB
    bucket_growth: float = 0.05

    @property
    def cpu_buckets(self) -> ExponentialBuckets:
        return ExponentialBuckets(1000.0, 0.01, 1.0 + self.bucket_growth, EPSILON)

    @property
    def memory_buckets(self) -> ExponentialBuckets:
        return ExponentialBuckets(1e12, 1e7, 1.0 + self.bucket_growth, EPSILON)

    @property
    def memory_window(self) -> float:
        return self.memory_interval * self.memory_interval_count


class AggregateContainerState:
    """The usage history of all instances of one container name under one VPA."""

    def __init__(self, config: AggregationsConfig = AggregationsConfig(), created: float = 0.0) -> None:
        self.config = config
        self.cpu = DecayingHistogram(config.cpu_buckets, config.cpu_half_life)
        self.memory = DecayingHistogram(config.memory_buckets, config.memory_half_life)
        self.first_sample_start: float | None = None
        self.last_sample_start: float | None = None
        self.total_samples = 0
        self.created = created

    def add_cpu(self, millicores: int, t: float) -> None:
        self.cpu.add(millicores / 1000.0, MIN_SAMPLE_WEIGHT, t)
        if self.last_sample_start is None or t > self.last_sample_start:
            self.last_sample_start = t
        if self.first_sample_start is None or t < self.first_sample_start:
            self.first_sample_start = t
        self.total_samples += 1

    def add_memory_peak(self, memory_bytes: int, t: float) -> None:
        self.memory.add(float(memory_bytes), 1.0, t)

    def subtract_memory_peak(self, memory_bytes: int, t: float) -> None:
        self.memory.subtract(float(memory_bytes), 1.0, t)

    def merge(self, other: AggregateContainerState) -> None:
        self.cpu.merge(other.cpu)
        self.memory.merge(other.memory)
        if other.first_sample_start is not None and (
            self.first_sample_start is None or other.first_sample_start < self.first_sample_start
        ):
            self.first_sample_start = other.first_sample_start
        if other.last_sample_start is not None and (
            self.last_sample_start is None or other.last_sample_start > self.last_sample_start
        ):
            self.last_sample_start = other.last_sample_start
        self.total_samples += other.total_samples

    def is_expired(self, now: float) -> bool:
        """Nothing seen for the memory window (8 days): the state can go."""
        if self.total_samples == 0:
            return now - self.created >= self.config.memory_window
        assert self.last_sample_start is not None
        return now - self.last_sample_start >= self.config.memory_window

    def to_checkpoint(self, now: float) -> dict[str, Any]:
        """VerticalPodAutoscalerCheckpointStatus as JSON."""
        return {
            "lastUpdateTime": rfc3339(now),
            "version": CHECKPOINT_VERSION,
            "cpuHistogram": self.cpu.to_checkpoint(),
            "memoryHistogram": self.memory.to_checkpoint(),
            "firstSampleStart": rfc3339(self.first_sample_start),
            "lastSampleStart": rfc3339(self.last_sample_start),
            "totalSamplesCount": self.total_samples,
        }

    @classmethod
    def from_checkpoint(
        cls, status: Mapping[str, Any], config: AggregationsConfig = AggregationsConfig(), created: float = 0.0
    ) -> AggregateContainerState:
        """A state loaded from a checkpoint; CheckpointError (naming the problem) when it cannot be."""
        if not isinstance(status, Mapping):
            raise CheckpointError("checkpoint status must be an object")
        if status.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(f"unsupported checkpoint version {status.get('version')}")
        count = status.get("totalSamplesCount", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise CheckpointError(f"checkpoint has an invalid totalSamplesCount {count!r}")
        state = cls(config, created)
        state.total_samples = count
        state.first_sample_start = parse_rfc3339(status.get("firstSampleStart"))
        state.last_sample_start = parse_rfc3339(status.get("lastSampleStart"))
        state.memory.load_checkpoint(status.get("memoryHistogram") or {})
        state.cpu.load_checkpoint(status.get("cpuHistogram") or {})
        return state


class OOMTooOld(ValueError):
    """An OOM event older than an aggregation interval before the latest sample."""


@dataclass(slots=True)
class ContainerState:
    """One container instance (a pod's container) feeding an AggregateContainerState."""

    aggregate: AggregateContainerState
    memory_request: int = 0  # bytes
    last_cpu_sample_start: float | None = None
    memory_peak: int = 0
    oom_peak: int = 0
    window_end: float | None = None
    last_memory_sample_start: float | None = None
    _config: AggregationsConfig = field(init=False)

    def __post_init__(self) -> None:
        self._config = self.aggregate.config

    def add_cpu_sample(self, millicores: int, t: float) -> bool:
        """Aggregate a CPU sample (usage over the interval starting at t); False if dropped."""
        if millicores < 0 or (self.last_cpu_sample_start is not None and not t > self.last_cpu_sample_start):
            return False
        self.aggregate.add_cpu(millicores, t)
        self.last_cpu_sample_start = t
        return True

    def max_memory_peak(self) -> int:
        return max(self.memory_peak, self.oom_peak)

    def add_memory_sample(self, memory_bytes: int, t: float, oom: bool = False) -> bool:
        """Fold a working-set sample into the interval's peak; False if dropped."""
        if memory_bytes < 0 or (
            not oom and self.last_memory_sample_start is not None and t < self.last_memory_sample_start
        ):
            return False
        self.last_memory_sample_start = t
        if self.window_end is None:
            self.window_end = t
        add_new_peak = False
        if t < self.window_end:
            old = self.max_memory_peak()
            if old != 0 and memory_bytes > old:
                self.aggregate.subtract_memory_peak(old, self.window_end)
                add_new_peak = True
        else:
            interval = self._config.memory_interval
            shift = math.floor((t - self.window_end) / interval) * interval + interval
            self.window_end += shift
            self.memory_peak = 0
            self.oom_peak = 0
            add_new_peak = True
        if add_new_peak:
            self.aggregate.add_memory_peak(memory_bytes, self.window_end)
            if oom:
                self.oom_peak = memory_bytes
            else:
                self.memory_peak = memory_bytes
        return True

    def record_oom(self, t: float, memory_request: int | None = None) -> None:
        """An OOM kill: the bumped sample (see the module docstring). Raises OOMTooOld."""
        interval = self._config.memory_interval
        if self.last_memory_sample_start is not None and t < self.last_memory_sample_start - interval:
            raise OOMTooOld(f"OOM event will be discarded - it is too old ({rfc3339(t)})")
        request = self.memory_request if memory_request is None else memory_request
        used = max(request, self.memory_peak)  # the OOM peak is left out: repeated OOMs must not compound
        needed = max(used + amount(self._config.oom_min_bump), scale(used, self._config.oom_bump_ratio))
        if not self.add_memory_sample(needed, t, oom=True):
            raise OOMTooOld("adding OOM sample failed")
