"""How often the resource-metrics sampler reads and over what window it computes CPU rates
(pure, validated). Config.stats builds one from the statsInterval, statsCPURateWindow,
statsStorageInterval and statsMaxOpenFiles keys; the errors name those keys."""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core.errors import FieldError

MIN_INTERVAL = 0.1  # below this the pass itself (a few ms for 100 pods) becomes the load
STALE_INTERVALS = 5  # a snapshot older than this many intervals is not served (the sampler stalled)


@dataclass(frozen=True, slots=True)
class StatsSettings:
    """`interval`: one read pass of every pod cgroup; `cpu_window`: the span of usageNanoCores
    (at least one interval); `storage_interval`: how often log and volume directories are walked
    (du is the costly part; 0 means every pass); `max_open_files`: descriptors kept open for
    re-reading (None: half the soft RLIMIT_NOFILE)."""

    interval: float = 1.0
    cpu_window: float = 1.0
    storage_interval: float = 10.0
    max_open_files: int | None = None

    def __post_init__(self) -> None:
        if not self.interval >= MIN_INTERVAL:
            raise FieldError("statsInterval", f"must be at least {MIN_INTERVAL}s, got {self.interval}s")
        if not self.cpu_window >= self.interval:
            raise FieldError("statsCPURateWindow",
                             f"must be at least statsInterval ({self.interval}s), got {self.cpu_window}s")
        if not self.storage_interval >= 0:
            raise FieldError("statsStorageInterval", f"must not be negative, got {self.storage_interval}s")
        if self.max_open_files is not None and self.max_open_files < 0:
            raise FieldError("statsMaxOpenFiles", f"must not be negative, got {self.max_open_files}")

    @property
    def tolerance(self) -> float:
        """How early a sample may come and still close a CPU window: half an interval."""
        return self.interval / 2

    @property
    def stale_after(self) -> float:
        return STALE_INTERVALS * self.interval


__all__ = ["MIN_INTERVAL", "STALE_INTERVALS", "StatsSettings"]
