"""One probe of one container, as the kubelet's prober worker (pkg/kubelet/prober/worker.go): pure.

The runner calls `begin(view, now, wall)` at each due time; when it says `probe`, it runs the
executor and hands the outcome to `record(outcome, now)`. Both return what changed; nothing here
reads a clock or does I/O, so every rule is table-tested with made-up times.

Rules, as the kubelet:
- Schedule: the first tick is at the start, then one every periodSeconds (a tick missed while a
  slow probe ran is taken at once, as Go's ticker buffers one). `trigger(now)` brings the next
  tick forward (the kubelet triggers a readiness probe when a status update finds it not ready).
- Initial value per container: readiness Failure, liveness Success, startup Unknown; set again
  for every new container ID (a restart), which also lifts a hold.
- A container that is not running publishes Failure; the worker stops when it will not run again
  (terminated under restartPolicy Never) or the pod is terminal. A pod being deleted publishes
  Success for liveness and startup and stops them (a quiet shutdown).
- No probe while `int(wall - startedAt) < initialDelaySeconds`. Liveness and readiness wait
  until the container has started (its startup probe succeeded); the startup probe stops probing
  once it has.
- Counting: a result equal to the last one extends its run; the published result changes only
  when a run reaches failureThreshold (failures) or successThreshold (successes).
- A published liveness or startup Failure means "restart this container": the step carries the
  Killing event (`Container c failed liveness probe, will be restarted`, or without the tail
  under restartPolicy Never) and the probe's terminationGracePeriodSeconds if it has one; the
  worker then holds (probes nothing) until it sees a new container ID.
- Every failed attempt is reported (`Unhealthy`, `Liveness probe failed: <output>`), a warning
  as `ProbeWarning` (`Readiness probe warning: <output>`), as prober.go records them. An attempt
  that could not run at all (Verdict.UNKNOWN: a named port the container lacks) is reported as
  `... probe errored and resulted in unknown state: ...` and its result thrown away.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodeagent.agent.probes.results import ProbeOutcome, Result, Verdict
from nodeagent.core.model.probe import Probe, ProbeKind

TITLE: dict[ProbeKind, str] = {"liveness": "Liveness", "readiness": "Readiness", "startup": "Startup"}
INITIAL: dict[ProbeKind, Result] = {"readiness": Result.FAILURE, "liveness": Result.SUCCESS, "startup": Result.UNKNOWN}
REASON_UNHEALTHY = "Unhealthy"
REASON_PROBE_WARNING = "ProbeWarning"
REASON_KILLING = "Killing"


@dataclass(frozen=True)
class ContainerView:
    """The container as its status shows it at a tick."""

    container_id: str = ""  # "" until the container exists
    running: bool = False
    started_at: float | None = None  # wall time the running process started
    started: bool = False  # Started in its status: startup probe succeeded (or there is none)
    terminated: bool = False
    pod_terminal: bool = False
    deleting: bool = False


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type_: str = "Warning"


class Action(enum.Enum):
    PROBE = "probe"
    WAIT = "wait"
    STOP = "stop"


@dataclass(frozen=True)
class Step:
    """What a call decided. `published` is the new result when it changed, else None."""

    action: Action = Action.WAIT
    published: Result | None = None
    events: tuple[Event, ...] = ()
    kill: bool = False  # liveness/startup failed: kill the container (restart per policy)
    kill_grace_period: int | None = None  # the probe's terminationGracePeriodSeconds, if set


_WAIT = Step(Action.WAIT)
_PROBE = Step(Action.PROBE)


def _step(action: Action, published: Result | None) -> Step:
    """A step with no events: the two common ones are made once (a probe a second each)."""
    if published is None:
        return _PROBE if action is Action.PROBE else _WAIT
    return Step(action, published)


class ProbeState:
    def __init__(self, kind: ProbeKind, probe: Probe, container: str, *, start: float,
                 restart_on_failure: bool = True) -> None:
        self.kind: ProbeKind = kind
        self.probe = probe
        self.container = container
        self.restart_on_failure = restart_on_failure
        self.next_due = start
        self.container_id = ""
        self.result: Result | None = None  # what is published for container_id
        self.last_result: Result | None = None
        self.run = 0
        self.on_hold = False
        self.stopped = False

    @property
    def period(self) -> float:
        return float(self.probe.period_seconds)

    @property
    def timeout(self) -> float:
        return float(self.probe.timeout_seconds)

    def trigger(self, now: float) -> None:
        """Probe at the next chance instead of waiting out the period."""
        self.next_due = min(self.next_due, now)

    def _publish(self, result: Result) -> Result | None:
        if result == self.result:
            return None
        self.result = result
        return result

    def _advance(self, now: float) -> None:
        self.next_due += self.period
        if self.next_due <= now:
            self.next_due = now

    def begin(self, view: ContainerView, now: float, wall: float) -> Step:
        """At a due tick: probe, wait for the next tick, or stop for good."""
        if self.stopped:
            return Step(Action.STOP)
        self._advance(now)
        if view.pod_terminal:
            return self._stop(None)
        if not view.container_id:
            return _WAIT
        published = None
        if view.container_id != self.container_id:
            self.container_id = view.container_id
            self.result = None
            published = self._publish(INITIAL[self.kind])
            self.on_hold = False
        if self.on_hold:
            return Step(Action.WAIT, published)
        if not view.running:
            published = self._publish(Result.FAILURE) or published
            if view.terminated and not self.restart_on_failure:
                return self._stop(published)
            return Step(Action.WAIT, published)
        if view.deleting and self.kind in ("liveness", "startup"):
            return self._stop(self._publish(Result.SUCCESS) or published)
        started_at = view.started_at if view.started_at is not None else wall
        if int(wall - started_at) < self.probe.initial_delay_seconds:
            return Step(Action.WAIT, published)
        if view.started:
            if self.kind == "startup":
                return Step(Action.WAIT, published)
        elif self.kind != "startup":
            return Step(Action.WAIT, published)
        return _step(Action.PROBE, published)

    def _stop(self, published: Result | None) -> Step:
        self.stopped = True
        return Step(Action.STOP, published)

    def record(self, outcome: ProbeOutcome) -> Step:
        """The outcome of the attempt `begin` asked for: report it, count it, maybe publish it."""
        events: list[Event] = []
        title = TITLE[self.kind]
        if outcome.verdict is Verdict.UNKNOWN:  # the probe could not run: reported, not counted
            message = f"{title} probe errored and resulted in unknown state: {outcome.output}"
            return Step(Action.WAIT, None, (Event(REASON_UNHEALTHY, message),))
        if outcome.verdict is Verdict.WARNING:
            events.append(Event(REASON_PROBE_WARNING, f"{title} probe warning: {outcome.output}"))
        elif outcome.verdict is not Verdict.SUCCESS:
            events.append(Event(REASON_UNHEALTHY, f"{title} probe failed: {outcome.output}"))
        result = outcome.result
        if result == self.last_result:
            self.run += 1
        else:
            self.last_result = result
            self.run = 1
        below = (result is Result.FAILURE and self.run < self.probe.failure_threshold) or (
            result is Result.SUCCESS and self.run < self.probe.success_threshold
        )
        if below:
            return Step(Action.WAIT, None, tuple(events)) if events else _WAIT
        published = self._publish(result)
        if self.kind in ("liveness", "startup") and result is Result.FAILURE:
            self.on_hold = True
            self.run = 0
            message = f"Container {self.container} failed {self.kind} probe"
            if self.restart_on_failure:
                message += ", will be restarted"
            events.append(Event(REASON_KILLING, message, "Normal"))
            return Step(Action.WAIT, published, tuple(events), kill=True,
                        kill_grace_period=self.probe.termination_grace_period_seconds)
        return Step(Action.WAIT, published, tuple(events)) if events else _step(Action.WAIT, published)
