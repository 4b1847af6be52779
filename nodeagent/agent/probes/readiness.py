"""Container `started` / `ready` from probe results, and the pod's kubelet-owned conditions: pure.

Per container (the prober manager's UpdatePodStatus): started = running and (no startup probe, or
its result is Success); ready = started and running and (no readiness probe, or its result is
Success). A regular init container is ready once it exited 0; a sidecar (restartable init
container) is ready as an app container is.

Conditions (pkg/kubelet/status/generate.go):
- ContainersReady: every app container and every sidecar ready; else False, reason
  ContainersNotReady, message "containers with unready status: [a b]" (unknown ones listed first
  as "containers with unknown status: [...]"); reason PodCompleted when the phase is Succeeded.
- Ready: as ContainersReady (readiness gates are not modelled: no spec.readinessGates yet).
- Initialized: every regular init container ready and every sidecar started, or any app
  container has started before (a restarting sidecar does not un-initialize a pod); else False,
  reason ContainersNotInitialized, "containers with incomplete status: [...]"; PodCompleted when
  Succeeded.
lastTransitionTime changes only when a condition's status changes (the status manager's
updateLastTransitionTime); the caller keeps the previous conditions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.agent.probes.results import Result
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, Waiting
from nodeagent.core.model.pod import PodSpec
from nodeagent.core.timefmt import rfc3339

INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
REASON_NOT_READY = "ContainersNotReady"
REASON_NOT_INITIALIZED = "ContainersNotInitialized"
REASON_COMPLETED = "PodCompleted"
REASON_UNKNOWN = "UnknownContainerStatuses"


def container_started(status: ContainerStatus | None, startup: Result | None, has_startup_probe: bool) -> bool:
    if status is None or not isinstance(status.state, Running):
        return False
    return startup is Result.SUCCESS if has_startup_probe else True


def container_ready(status: ContainerStatus | None, started: bool, readiness: Result | None,
                    has_readiness_probe: bool) -> bool:
    if status is None or not started or not isinstance(status.state, Running):
        return False
    return readiness is Result.SUCCESS if has_readiness_probe else True


def init_container_ready(status: ContainerStatus | None) -> bool:
    """A regular init container is ready once it has exited 0."""
    return status is not None and isinstance(status.state, Terminated) and status.state.exit_code == 0


@dataclass(frozen=True)
class ContainerFacts:
    """One container's status with the prober's view of it."""

    status: ContainerStatus | None
    started: bool = False
    ready: bool = False


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    last_transition_time: float
    reason: str = ""
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"type": self.type, "status": "True" if self.status else "False",
                                  "lastProbeTime": None,
                                  "lastTransitionTime": rfc3339(self.last_transition_time)}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


def _names(names: Sequence[str]) -> str:
    return "[" + " ".join(names) + "]"  # Go's %s of a []string


def _any_app_container_started(spec: PodSpec, facts: Mapping[str, ContainerFacts]) -> bool:
    """kubecontainer.HasAnyRegularContainerStarted: running or terminated, now or before."""
    for c in spec.containers:
        f = facts.get(c.name)
        if f is None or f.status is None:
            continue
        state = f.status.state
        if isinstance(state, Running | Terminated):
            return True
        if isinstance(state, Waiting) and f.status.last_state is not None:
            return True
    return False


def _unready(spec: PodSpec, facts: Mapping[str, ContainerFacts]) -> tuple[list[str], list[str]]:
    unknown: list[str] = []
    unready: list[str] = []
    for c in [*(i for i in spec.init_containers if i.is_sidecar), *spec.containers]:
        f = facts.get(c.name)
        if f is None or f.status is None:
            unknown.append(c.name)
        elif not f.ready:
            unready.append(c.name)
    return unknown, unready


def _incomplete(spec: PodSpec, facts: Mapping[str, ContainerFacts]) -> tuple[list[str], list[str]]:
    unknown: list[str] = []
    incomplete: list[str] = []
    for c in spec.init_containers:
        f = facts.get(c.name)
        if f is None or f.status is None:
            unknown.append(c.name)
        elif (c.is_sidecar and not f.started) or (not c.is_sidecar and not f.ready):
            incomplete.append(c.name)
    return unknown, incomplete


def _message(unknown: list[str], bad: list[str], what: str) -> str:
    parts = []
    if unknown:
        parts.append(f"containers with unknown status: {_names(unknown)}")
    if bad:
        parts.append(f"containers with {what} status: {_names(bad)}")
    return ", ".join(parts)


def pod_conditions(spec: PodSpec, facts: Mapping[str, ContainerFacts], phase: str,
                   previous: Sequence[Condition], now: float) -> list[Condition]:
    """[Initialized, Ready, ContainersReady] for the pod, keeping lastTransitionTime where the status held."""
    unknown, incomplete = _incomplete(spec, facts)
    if not spec.init_containers:
        initialized = (True, "", "")
    elif phase == "Succeeded" and not unknown:
        initialized = (True, REASON_COMPLETED, "")
    elif _any_app_container_started(spec, facts):
        initialized = (True, "", "")
    elif msg := _message(unknown, incomplete, "incomplete"):
        initialized = (False, REASON_NOT_INITIALIZED, msg)
    else:
        initialized = (True, "", "")
    unknown, unready = _unready(spec, facts)
    if phase == "Succeeded" and not unknown:
        containers_ready = (False, REASON_COMPLETED, "")
    elif msg := _message(unknown, unready, "unready"):
        containers_ready = (False, REASON_NOT_READY, msg)
    else:
        containers_ready = (True, "", "")
    before = {c.type: c for c in previous}
    out = []
    for kind, (status, reason, message) in ((INITIALIZED, initialized), (READY, containers_ready),
                                            (CONTAINERS_READY, containers_ready)):
        old = before.get(kind)
        since = old.last_transition_time if old is not None and old.status == status else now
        out.append(Condition(kind, status, since, reason, message))
    return out
