"""Eviction thresholds: parsed from the kubelet's config maps, with the kubelet's rules.

Mirrors pkg/kubelet/eviction/helpers.go (ParseThresholdConfig and friends) and
pkg/kubelet/eviction/api/types.go (GetThresholdQuantity), so a KubeletConfiguration's
evictionHard/evictionSoft/evictionSoftGracePeriod/evictionMinimumReclaim mean the same here.
Pure: no I/O.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from nodeagent.core.duration import parse_go_duration_ns
from nodeagent.core.errors import FieldError, ValidationErrors
from nodeagent.core.quantity import Quantity, parse_quantity

OP_LESS_THAN = "LessThan"

MEMORY_AVAILABLE = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
NODEFS_AVAILABLE = "nodefs.available"
NODEFS_INODES_FREE = "nodefs.inodesFree"
IMAGEFS_AVAILABLE = "imagefs.available"
IMAGEFS_INODES_FREE = "imagefs.inodesFree"
CONTAINERFS_AVAILABLE = "containerfs.available"
CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
PID_AVAILABLE = "pid.available"

# Signal -> what it measures (the kubelet's signalToResource); every key is a valid signal.
SIGNAL_RESOURCE: dict[str, str] = {
    MEMORY_AVAILABLE: "memory",
    ALLOCATABLE_MEMORY_AVAILABLE: "memory",
    NODEFS_AVAILABLE: "ephemeral-storage",
    NODEFS_INODES_FREE: "inodes",
    IMAGEFS_AVAILABLE: "ephemeral-storage",
    IMAGEFS_INODES_FREE: "inodes",
    CONTAINERFS_AVAILABLE: "ephemeral-storage",
    CONTAINERFS_INODES_FREE: "inodes",
    PID_AVAILABLE: "pids",
}
SIGNALS = frozenset(SIGNAL_RESOURCE)
# The kubelet accepts containerfs.* but overrides them with the nodefs/imagefs thresholds
# (UpdateContainerFsThresholds); nodeagent has no separate container filesystem, so they are
# accepted for compatibility and left out of the effective list.
IGNORED_SIGNALS = frozenset({CONTAINERFS_AVAILABLE, CONTAINERFS_INODES_FREE})

# The kubelet's Linux defaults (pkg/kubelet/eviction/defaults_linux.go; imagefs.inodesFree was
# added with the split image filesystem work, so current kubelets default all five).
DEFAULT_EVICTION_HARD: dict[str, str] = {
    MEMORY_AVAILABLE: "100Mi",
    NODEFS_AVAILABLE: "10%",
    NODEFS_INODES_FREE: "5%",
    IMAGEFS_AVAILABLE: "15%",
    IMAGEFS_INODES_FREE: "5%",
}

_PERCENT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?%")


def _float32(value: float) -> float:
    """Round to IEEE single precision: the kubelet keeps percentages as float32."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def _percentage(text: str) -> float:
    """Parse "10.5%" as the kubelet does: float32(value) / 100 in float32."""
    if not _PERCENT.fullmatch(text):
        raise ValueError(f'invalid percentage "{text}"')
    return _float32(_float32(float(text[:-1])) / 100)


def format_percentage(fraction: float) -> str:
    """Shortest "N%" text that parses back to the same float32 fraction."""
    for digits in range(10):
        text = f"{fraction * 100:.{digits}f}"
        text = (text.rstrip("0").rstrip(".") if "." in text else text) + "%"
        if _percentage(text) == fraction:
            return text
    return f"{fraction * 100!r}%"


@dataclass(frozen=True)
class Threshold:
    """One eviction threshold: met when the signal's available amount is below the value.

    Exactly one of quantity / percentage is set; a percentage is a fraction 0 < p < 1 of the
    signal's capacity. `hard` says which map it came from. Note: the kubelet itself decides
    "hard" by grace period == 0, so a soft threshold with a 0s grace period acts like a hard one.
    """

    signal: str
    operator: str = OP_LESS_THAN
    quantity: Quantity | None = None
    percentage: float | None = None
    grace_period: float = 0.0
    min_reclaim: Quantity | None = None
    min_reclaim_percentage: float | None = None
    hard: bool = True

    def value_for(self, capacity: int) -> int:
        """Absolute threshold (bytes, inodes, pids): int64(float64(capacity) * float64(pct))."""
        if self.quantity is not None:
            return self.quantity.value()
        return int(float(capacity) * (self.percentage or 0.0))

    def min_reclaim_for(self, capacity: int) -> int:
        """Absolute minimum reclaim on top of the threshold once it fired; 0 when unset."""
        if self.min_reclaim is not None:
            return self.min_reclaim.value()
        if self.min_reclaim_percentage is not None:
            return int(float(capacity) * self.min_reclaim_percentage)
        return 0

    @property
    def resource(self) -> str:
        """What the signal measures: memory, ephemeral-storage, inodes or pids."""
        return SIGNAL_RESOURCE[self.signal]

    def value_text(self) -> str:
        """The threshold as written: "100Mi" or "10%"."""
        return str(self.quantity) if self.quantity is not None else format_percentage(self.percentage or 0.0)


def _is_negative(quantity: Quantity) -> bool:
    return quantity.milli_value() < 0


def _check_signal(key: str, signal: str, errors: list[FieldError]) -> bool:
    if signal in SIGNALS:
        return True
    valid = ", ".join(sorted(SIGNALS))
    errors.append(FieldError(f"{key}.{signal}", f"unsupported eviction signal; valid signals: {valid}"))
    return False


def _parse_statement(key: str, signal: str, text: object, errors: list[FieldError]) -> Threshold | None:
    """One evictionHard/evictionSoft entry -> Threshold, or None when disabled ("0%"/"100%")."""
    path = f"{key}.{signal}"
    if not _check_signal(key, signal, errors):
        return None
    if not isinstance(text, str):
        errors.append(FieldError(path, f"expected a quantity or percentage string, got {text!r}"))
        return None
    if text.endswith("%"):
        try:
            fraction = _percentage(text)
        except ValueError as exc:
            errors.append(FieldError(path, str(exc)))
            return None
        if fraction < 0:
            errors.append(FieldError(path, f'percentage must be >= 0%: "{text}"'))
            return None
        if fraction > 1:
            errors.append(FieldError(path, f'percentage must be <= 100%: "{text}"'))
            return None
        if fraction in (0.0, 1.0):
            # The kubelet skips exactly "0%" and "100%"; we also skip "0.0%" and "100.0%",
            # which the kubelet would keep as a never-met / always-met threshold.
            return None
        return Threshold(signal=signal, percentage=fraction)
    try:
        quantity = parse_quantity(text)
    except ValueError as exc:
        errors.append(FieldError(path, str(exc)))
        return None
    if quantity.milli_value() <= 0:
        errors.append(FieldError(path, f'threshold must be positive: "{text}"'))
        return None
    return Threshold(signal=signal, quantity=quantity)


def _parse_grace_periods(periods: Mapping[str, object], errors: list[FieldError]) -> dict[str, float]:
    out: dict[str, float] = {}
    key = "evictionSoftGracePeriod"
    for signal, text in periods.items():
        if not _check_signal(key, signal, errors):
            continue
        try:
            nanos = parse_go_duration_ns(text)  # type: ignore[arg-type]
        except ValueError as exc:
            errors.append(FieldError(f"{key}.{signal}", str(exc)))
            continue
        if nanos < 0:
            errors.append(FieldError(f"{key}.{signal}", f'grace period must not be negative: "{text}"'))
            continue
        out[signal] = nanos / 1e9
    return out


def _parse_min_reclaims(
    reclaims: Mapping[str, object], errors: list[FieldError]
) -> dict[str, tuple[Quantity | None, float | None]]:
    out: dict[str, tuple[Quantity | None, float | None]] = {}
    key = "evictionMinimumReclaim"
    for signal, text in reclaims.items():
        path = f"{key}.{signal}"
        if not _check_signal(key, signal, errors):
            continue
        if not isinstance(text, str):
            errors.append(FieldError(path, f"expected a quantity or percentage string, got {text!r}"))
            continue
        if text.endswith("%"):
            try:
                fraction = _percentage(text)
            except ValueError as exc:
                errors.append(FieldError(path, str(exc)))
                continue
            if fraction <= 0:
                errors.append(FieldError(path, f'percentage must be positive: "{text}"'))
            elif fraction > 1:  # the kubelet does not check this; a reclaim above 100% is meaningless
                errors.append(FieldError(path, f'percentage must be <= 100%: "{text}"'))
            else:
                out[signal] = (None, fraction)
            continue
        try:
            quantity = parse_quantity(text)
        except ValueError as exc:
            errors.append(FieldError(path, str(exc)))
            continue
        if _is_negative(quantity):
            errors.append(FieldError(path, f'minimum reclaim must not be negative: "{text}"'))
            continue
        out[signal] = (quantity, None)
    return out


def parse_thresholds(
    eviction_hard: Mapping[str, object] | None,
    eviction_soft: Mapping[str, object] | None,
    eviction_soft_grace_period: Mapping[str, object] | None,
    eviction_minimum_reclaim: Mapping[str, object] | None,
    *,
    enforce_node_allocatable: Iterable[str] = (),
) -> list[Threshold]:
    """The effective thresholds: hard ones, then soft ones, in map order.

    Raises ValidationErrors naming each bad key (`evictionSoft.memory.available: ...`).
    Every soft threshold needs a grace period; a grace period without a soft threshold is
    accepted and unused, as in the kubelet. With "pods" in enforce_node_allocatable, each
    memory.available threshold with no grace period is copied as allocatableMemory.available,
    as the kubelet does (addAllocatableThresholds).
    """
    errors: list[FieldError] = []
    hard = [_parse_statement("evictionHard", s, v, errors) for s, v in (eviction_hard or {}).items()]
    soft = [_parse_statement("evictionSoft", s, v, errors) for s, v in (eviction_soft or {}).items()]
    grace = _parse_grace_periods(eviction_soft_grace_period or {}, errors)
    reclaims = _parse_min_reclaims(eviction_minimum_reclaim or {}, errors)

    results: list[Threshold] = [t for t in hard if t is not None]
    for threshold in soft:
        if threshold is None:
            continue
        if threshold.signal not in grace:
            if threshold.signal in (eviction_soft_grace_period or {}):
                continue  # its grace period was invalid and is already reported
            errors.append(
                FieldError(
                    f"evictionSoftGracePeriod.{threshold.signal}",
                    f"required: evictionSoft.{threshold.signal} is set and every soft threshold needs a grace period",
                )
            )
            continue
        results.append(replace(threshold, grace_period=grace[threshold.signal], hard=False))
    if errors:
        raise ValidationErrors(errors)

    with_reclaim = []
    for threshold in results:
        quantity, fraction = reclaims.get(threshold.signal, (None, None))
        with_reclaim.append(replace(threshold, min_reclaim=quantity, min_reclaim_percentage=fraction))
    if "pods" in set(enforce_node_allocatable):
        with_reclaim += [
            replace(t, signal=ALLOCATABLE_MEMORY_AVAILABLE, grace_period=0.0, hard=True)
            for t in with_reclaim
            if t.signal == MEMORY_AVAILABLE and t.grace_period == 0
        ]
    return [t for t in with_reclaim if t.signal not in IGNORED_SIGNALS]


def hard_thresholds(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """The thresholds from evictionHard (what allocatable subtracts)."""
    return [t for t in thresholds if t.hard and t.signal != ALLOCATABLE_MEMORY_AVAILABLE]
