"""The kubelet's crash-loop back-off for one container, as pure logic over an injectable clock.

It mirrors client-go's flowcontrol.Backoff as the kubelet uses it (backOffPeriod 10s,
MaxContainerBackOff 300s) together with kuberuntime's doBackOff:

- When a container exits at `finished_at`, it is "in back-off" if an entry exists, the entry has
  not expired, and less than the entry's delay has passed since `finished_at`. It then waits
  (state Waiting, reason CrashLoopBackOff, message "back-off 20s restarting failed ...").
- When it is restarted, the entry moves on (`Next`): the first time (or after expiry) it becomes
  the initial 10 s, otherwise it doubles, capped at 5 min; the restart time is remembered.
- Expiry (`hasExpired`): an exit more than 2 x max (10 min) after the last restart resets the
  curve: a container that ran 10 minutes without crashing starts again from 10 s.

So a container that crashes at once is restarted after 0 s, 10 s, 20 s, 40 s, 80 s, 160 s, 300 s,
300 s...: the kubelet restarts the first crash immediately, as this does. Times are the Clock's
monotonic seconds (`Clock.now()`), never wall time, so clock steps cannot shorten a back-off.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.core.clock import Clock, SystemClock

BACKOFF_PERIOD_S = 10.0  # kubelet backOffPeriod
MAX_CONTAINER_BACKOFF_S = 300.0  # kubelet MaxContainerBackOff


@dataclass
class _Entry:
    delay: float
    last_update: float


class CrashBackoff:
    """Back-off state of one container (the kubelet keys it by pod and container; a worker owns one)."""

    def __init__(
        self,
        initial: float = BACKOFF_PERIOD_S,
        maximum: float = MAX_CONTAINER_BACKOFF_S,
        clock: Clock | None = None,
    ) -> None:
        if initial <= 0:
            raise ValueError(f"initial: back-off must be positive, got {initial}")
        if maximum < initial:
            raise ValueError(f"maximum: {maximum} is below the initial back-off {initial}")
        self.initial = initial
        self.maximum = maximum
        self._clock: Clock = clock or SystemClock()
        self._entry: _Entry | None = None

    def _expired(self, event_time: float) -> bool:
        assert self._entry is not None
        return event_time - self._entry.last_update > 2 * self.maximum

    def current(self) -> float:
        """The delay shown in the CrashLoopBackOff message (flowcontrol Get); 0 with no entry."""
        return self._entry.delay if self._entry else 0.0

    def remaining(self, finished_at: float) -> float:
        """Seconds still to wait before restarting a container that exited at `finished_at`.

        0 means restart now (IsInBackOffSince is false); `finished_at` is on the Clock's
        monotonic scale.
        """
        if self._entry is None or self._expired(finished_at):
            return 0.0
        left = finished_at + self._entry.delay - self._clock.now()
        return left if left > 0 else 0.0

    def restarted(self, finished_at: float) -> None:
        """Record a restart of the container that exited at `finished_at` (flowcontrol Next)."""
        if self._entry is None or self._expired(finished_at):
            self._entry = _Entry(self.initial, self._clock.now())
        else:
            self._entry.delay = min(self._entry.delay * 2, self.maximum)
            self._entry.last_update = self._clock.now()

    def reset(self) -> None:
        self._entry = None

    def snapshot(self) -> tuple[float, float] | None:
        """(delay, last_update) for a checkpoint; None when there is no entry."""
        return (self._entry.delay, self._entry.last_update) if self._entry else None

    def restore(self, snap: tuple[float, float] | None) -> None:
        self._entry = _Entry(*snap) if snap else None
