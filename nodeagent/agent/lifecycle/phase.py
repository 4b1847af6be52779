"""The pod phase with init containers and sidecars, as the kubelet's getPhase (pure).

Regular init containers: one that has not run, runs, or waits without having run before keeps
the pod Pending; one that exited non-zero (now, or as the last state of a waiting restart) fails
the pod under restartPolicy Never. Sidecars (restartable init containers): a running one that has
not started yet, or a waiting one that never ran, keeps the pod pending unless an app container
has already started (the pod has initialized: a restarting sidecar does not put a running pod
back to Pending); once running they count as running; a terminated sidecar does not count. A
pending regular init container always keeps the pod Pending (the newest getPhase, which splits
pendingRegularInitContainers from pendingRestartableInitContainers). App containers, and the end
states (Succeeded / Failed / Running under Always or OnFailure), are as runtime.state.pod_phase,
which this extends and agrees with on pods without init containers.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.agent.runtime.state import RESTART_POLICIES, ContainerStatus, Running, Terminated, Waiting
from nodeagent.core.model.pod import PodSpec


def _has_run(cs: ContainerStatus) -> bool:
    return isinstance(cs.state, Running | Terminated) or cs.last_state is not None


def any_app_container_started(spec: PodSpec, statuses: Mapping[str, ContainerStatus]) -> bool:
    """kubecontainer.HasAnyRegularContainerStarted."""
    return any((cs := statuses.get(c.name)) is not None and isinstance(cs.state, Running | Terminated)
               for c in spec.containers)


def pod_phase(spec: PodSpec, statuses: Mapping[str, ContainerStatus], started: Mapping[str, bool],
              pod_is_terminal: bool = False, is_static: bool = False) -> str:
    """Pending, Running, Succeeded or Failed. `started` holds each container's Started (startup probe)."""
    if spec.restart_policy not in RESTART_POLICIES:
        raise ValueError(f"restartPolicy: {spec.restart_policy!r} is not one of {', '.join(RESTART_POLICIES)}")
    pending_regular = pending_sidecars = failed_init = 0
    unknown = running = waiting = stopped = succeeded = 0
    for c in spec.init_containers:
        cs = statuses.get(c.name)
        if c.is_sidecar:
            if cs is None:
                unknown += 1
            elif isinstance(cs.state, Running):
                if not started.get(c.name, False):
                    pending_sidecars += 1
                running += 1
            elif isinstance(cs.state, Waiting) and cs.last_state is None:
                pending_sidecars += 1
                waiting += 1
            continue  # a terminated sidecar (now or last) does not count
        if cs is None or isinstance(cs.state, Running):
            pending_regular += 1
        elif isinstance(cs.state, Terminated):
            failed_init += cs.state.exit_code != 0
        elif cs.last_state is not None:
            failed_init += cs.last_state.exit_code != 0
        else:
            pending_regular += 1
    for c in spec.containers:
        cs = statuses.get(c.name)
        if cs is None:
            unknown += 1
        elif isinstance(cs.state, Running):
            running += 1
        elif isinstance(cs.state, Terminated):
            stopped += 1
            succeeded += cs.state.exit_code == 0
        elif cs.last_state is not None:
            stopped += 1
        else:
            waiting += 1
    if failed_init and spec.restart_policy == "Never":
        return "Failed"
    if pending_regular or (pending_sidecars and not any_app_container_started(spec, statuses)) or waiting:
        return "Pending"
    if running and not unknown:
        return "Running"
    if not running and stopped and not unknown:
        if pod_is_terminal and not is_static:
            return "Succeeded" if stopped == succeeded else "Failed"
        if spec.restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if spec.restart_policy == "Never" else "Running"
    return "Pending"
