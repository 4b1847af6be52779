"""What to start next in a pod with init containers (pure), as the kubelet's init-container actions.

Walk the init containers in order:
- a regular init container that has no status is started, and nothing after it; one that runs,
  or waits to be restarted, holds everything after it; one that exited 0 lets the walk go on; one
  that failed for good fails the pod under restartPolicy Never (its supervisor runs it with
  restart policy Never), else its supervisor restarts it (OnFailure, with back-off) and the walk
  waits;
- a sidecar (restartPolicy: Always) that has no status is started and the walk waits until it has
  started (its startup probe succeeded, or it runs and has none); once started the walk goes on.
  A sidecar is never "done": its supervisor restarts it whenever it exits (Always).
When the walk has passed every init container the pod is initialized and every app container
without a status is started, all at once. Once any app container has run, init containers are
not run again (a regular one that is somehow missing is not re-run; a sidecar that exited is
restarted by its supervisor).
When every app container has finished for good (terminated and its policy will not restart it),
the sidecars are stopped, in reverse order, so the pod can complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.agent.lifecycle.phase import any_app_container_started
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated, should_restart
from nodeagent.core.model.pod import Container, PodSpec


def supervisor_restart_policy(pod_policy: str, container: Container, *, init: bool) -> str:
    """The restart policy a container's supervisor runs with: sidecars Always; regular init
    containers OnFailure unless the pod's is Never (an init container that succeeded never runs
    again); app containers the pod's."""
    if init:
        if container.is_sidecar:
            return "Always"
        return "Never" if pod_policy == "Never" else "OnFailure"
    return pod_policy


@dataclass(frozen=True)
class InitSteps:
    start: tuple[str, ...] = ()  # containers to start now, in this order
    stop: tuple[str, ...] = ()  # sidecars to stop now (their app containers are done), in this order
    initialized: bool = False  # the app containers may run
    failed: str | None = None  # the init container that failed the pod (restartPolicy Never)


def next_steps(spec: PodSpec, statuses: Mapping[str, ContainerStatus], started: Mapping[str, bool]) -> InitSteps:
    """Which containers to start (or stop) given their statuses and Started flags."""
    ran = any_app_container_started(spec, statuses)
    if not ran:
        for c in spec.init_containers:
            cs = statuses.get(c.name)
            if cs is None:
                return InitSteps(start=(c.name,))
            if c.is_sidecar:
                if not started.get(c.name, False):
                    return InitSteps()  # running towards started, or restarting after an exit
                continue
            if isinstance(cs.state, Terminated):
                if cs.state.exit_code == 0:
                    continue
                if spec.restart_policy == "Never":
                    return InitSteps(failed=c.name)
            return InitSteps()  # running, or being restarted by its supervisor
    start = tuple(c.name for c in spec.containers if c.name not in statuses)
    done = all(_finished(spec.restart_policy, statuses.get(c.name)) for c in spec.containers)
    stop: tuple[str, ...] = ()
    if done:
        stop = tuple(c.name for c in reversed(spec.init_containers) if c.is_sidecar and _alive(statuses.get(c.name)))
    return InitSteps(start=start, stop=stop, initialized=True)


def _alive(cs: ContainerStatus | None) -> bool:
    return cs is not None and not isinstance(cs.state, Terminated)


def _finished(policy: str, cs: ContainerStatus | None) -> bool:
    return cs is not None and isinstance(cs.state, Terminated) and not should_restart(policy, cs.state)


def waiting_for(spec: PodSpec, statuses: Mapping[str, ContainerStatus], started: Mapping[str, bool]) -> str | None:
    """The init container the pod waits for (for the PodInitializing / Init:N/M display), if any."""
    if any_app_container_started(spec, statuses):
        return None
    for c in spec.init_containers:
        cs = statuses.get(c.name)
        if cs is None:
            return c.name
        if c.is_sidecar:
            if not (isinstance(cs.state, Running) and started.get(c.name, False)):
                return c.name
        elif not (isinstance(cs.state, Terminated) and cs.state.exit_code == 0):
            return c.name
    return None
