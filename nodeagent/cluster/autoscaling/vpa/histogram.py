"""VPA's histograms: exponential buckets, exponentially decaying weights, and their checkpoints.

As kubernetes/autoscaler vertical-pod-autoscaler/pkg/recommender/util (histogram.go,
decaying_histogram.go, histogram_options.go):
- buckets: the first covers [0, first); bucket n >= 1 starts at first * (ratio^n - 1) / (ratio - 1);
  the last starts at or beyond `maximum` and has no end. A bucket whose weight is below epsilon
  counts as empty.
- Percentile(p) walks buckets from the smallest non-empty one until the running weight reaches
  p * total and returns that bucket's end (the last bucket: its start); an empty histogram gives 0.
- a decaying histogram multiplies each sample's weight by 2^((t - reference) / half_life), so a
  sample loses half its importance every half-life; the reference time moves forward (a multiple
  of the half-life) whenever the exponent would pass 100, rescaling the stored weights.
- a checkpoint keeps the total weight and every bucket's weight scaled so the heaviest is 10000,
  as integers (HistogramCheckpoint: referenceTimestamp, bucketWeights, totalWeight).

Deviation: Go rounds the reference time to the half-life relative to year 1; here relative to the
Unix epoch. The two agree for any half-life that divides a day (24 h, the default, included).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.core.timefmt import parse_rfc3339, rfc3339

MAX_CHECKPOINT_WEIGHT = 10000
MAX_DECAY_EXPONENT = 100


def _round(x: float) -> int:
    """Go's util round: floor(x + 0.5)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True, slots=True)
class ExponentialBuckets:
    """NewExponentialHistogramOptions(maxValue, firstBucketSize, ratio, epsilon)."""

    maximum: float
    first: float
    ratio: float
    epsilon: float

    def __post_init__(self) -> None:
        if self.maximum <= 0 or self.first <= 0 or self.ratio <= 1 or self.epsilon <= 0:
            raise ValueError("maximum, first and epsilon must be > 0 and ratio > 1")

    @property
    def count(self) -> int:
        return math.ceil(math.log(self.maximum * (self.ratio - 1) / self.first + 1) / math.log(self.ratio)) + 1

    def find(self, value: float) -> int:
        if value < self.first:
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first + 1) / math.log(self.ratio))
        return min(bucket, self.count - 1)

    def start(self, bucket: int) -> float:
        if not 0 <= bucket < self.count:
            raise IndexError(f"bucket {bucket} out of range [0..{self.count - 1}]")
        if bucket == 0:
            return 0.0
        return self.first * (self.ratio**bucket - 1) / (self.ratio - 1)


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


class DecayingHistogram:
    """A histogram of weighted samples whose weights halve every `half_life` seconds."""

    def __init__(self, buckets: ExponentialBuckets, half_life: float) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life must be positive, got {half_life}")
        self.buckets = buckets
        self.half_life = half_life
        n = buckets.count
        self._n = n
        self.weights = [0.0] * n
        self.total = 0.0
        self.min_bucket = n - 1
        self.max_bucket = 0
        self.reference: float | None = None  # None: Go's zero time, before any sample

    # --- the plain histogram --------------------------------------------------------------------
    def _add(self, value: float, weight: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        bucket = self.buckets.find(value)
        self.weights[bucket] += weight
        self.total += weight
        eps = self.buckets.epsilon
        if bucket < self.min_bucket and self.weights[bucket] >= eps:
            self.min_bucket = bucket
        if bucket > self.max_bucket and self.weights[bucket] >= eps:
            self.max_bucket = bucket

    def _subtract(self, value: float, weight: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        bucket = self.buckets.find(value)
        eps = self.buckets.epsilon
        self.total = self.total - weight if self.total - weight >= eps else 0.0
        w = self.weights[bucket] - weight
        self.weights[bucket] = w if w >= eps else 0.0
        self._update_min_max()

    def _update_min_max(self) -> None:
        eps = self.buckets.epsilon
        last = self._n - 1
        while self.weights[self.min_bucket] < eps and self.min_bucket < last:
            self.min_bucket += 1
        while self.weights[self.max_bucket] < eps and self.max_bucket > 0:
            self.max_bucket -= 1

    def _scale(self, factor: float) -> None:
        if factor < 0:
            raise ValueError("scale factor must be non-negative")
        for b in range(self.min_bucket, self.max_bucket + 1):
            self.weights[b] *= factor
        self.total *= factor
        self._update_min_max()

    def is_empty(self) -> bool:
        return self.weights[self.min_bucket] < self.buckets.epsilon

    def percentile(self, p: float) -> float:
        if self.is_empty():
            return 0.0
        threshold = p * self.total
        partial = 0.0
        bucket = self.min_bucket
        while bucket < self.max_bucket:
            partial += self.weights[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self._n - 1:
            return self.buckets.start(bucket + 1)
        return self.buckets.start(bucket)

    # --- decay -----------------------------------------------------------------------------------
    def _shift_reference(self, new_reference: float) -> None:
        new_reference = _round(new_reference / self.half_life) * self.half_life
        if self.reference is None:
            self._scale(0.0)  # from Go's zero time: 2^-(hundreds of thousands) is 0
        else:
            exponent = _round((self.reference - new_reference) / self.half_life)
            self._scale(math.ldexp(1.0, exponent))
        self.reference = new_reference

    def _decay_factor(self, t: float) -> float:
        if self.reference is None or t > self.reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
        assert self.reference is not None
        return float(2.0 ** ((t - self.reference) / self.half_life))

    def add(self, value: float, weight: float, t: float) -> None:
        self._add(value, weight * self._decay_factor(t))

    def subtract(self, value: float, weight: float, t: float) -> None:
        self._subtract(value, weight * self._decay_factor(t))

    def merge(self, other: DecayingHistogram) -> None:
        if other.buckets != self.buckets or other.half_life != self.half_life:
            raise ValueError("can't merge histograms with different buckets or half-lives")
        if other.reference is not None and (self.reference is None or self.reference < other.reference):
            self._shift_reference(other.reference)
        elif self.reference is not None and (other.reference is None or other.reference < self.reference):
            other._shift_reference(self.reference)
        for b in range(other.min_bucket, other.max_bucket + 1):
            self.weights[b] += other.weights[b]
        self.total += other.total
        self.min_bucket = min(self.min_bucket, other.min_bucket)
        self.max_bucket = max(self.max_bucket, other.max_bucket)

    # --- checkpoints ---------------------------------------------------------------------------
    def to_checkpoint(self) -> dict[str, Any]:
        """HistogramCheckpoint as JSON (bucket indexes as strings, weights as integers)."""
        weights: dict[str, int] = {}
        heaviest = max((self.weights[b] for b in range(self.min_bucket, self.max_bucket + 1)), default=0.0)
        if heaviest > 0:
            ratio = MAX_CHECKPOINT_WEIGHT / heaviest
            for b in range(self.min_bucket, self.max_bucket + 1):
                w = _round(self.weights[b] * ratio)
                if w > 0:
                    weights[str(b)] = w
        return {
            "referenceTimestamp": None if self.reference is None else rfc3339(self.reference),
            "bucketWeights": weights,
            "totalWeight": self.total,
        }

    def load_checkpoint(self, checkpoint: Mapping[str, Any]) -> None:
        """Add a checkpoint's samples (LoadFromCheckpoint); CheckpointError on a malformed one."""
        if not isinstance(checkpoint, Mapping):
            raise CheckpointError("cannot load from empty checkpoint")
        total = checkpoint.get("totalWeight", 0.0)
        if isinstance(total, bool) or not isinstance(total, int | float) or not math.isfinite(total):
            raise CheckpointError(f"checkpoint has an invalid totalWeight {total!r}")
        if total < 0:
            raise CheckpointError(f"cannot load checkpoint with negative weight {total}")
        raw = checkpoint.get("bucketWeights") or {}
        if not isinstance(raw, Mapping):
            raise CheckpointError("checkpoint bucketWeights must be an object")
        parsed: dict[int, int] = {}
        for key, weight in raw.items():
            try:
                bucket = int(key)
            except (TypeError, ValueError):
                raise CheckpointError(f"checkpoint has a bucket {key!r} that is not an integer") from None
            if bucket >= self._n:
                raise CheckpointError(f"checkpoint has bucket {bucket} that is exceeding histogram buckets {self._n}")
            if bucket < 0:
                raise CheckpointError(f"checkpoint has a negative bucket {bucket}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight < 2**32:
                raise CheckpointError(f"checkpoint bucket {bucket} has an invalid weight {weight!r}")
            parsed[bucket] = weight
        reference = checkpoint.get("referenceTimestamp")
        ref = None if reference is None else parse_rfc3339(reference)
        if reference is not None and ref is None:
            raise CheckpointError(f"checkpoint has an invalid referenceTimestamp {reference!r}")
        weight_sum = sum(parsed.values())
        if weight_sum:
            ratio = float(total) / weight_sum
            for bucket, weight in parsed.items():
                self.min_bucket = min(self.min_bucket, bucket)
                self.max_bucket = max(self.max_bucket, bucket)
                self.weights[bucket] += weight * ratio
            self.total += float(total)
            self._update_min_max()
        self.reference = ref
