"""Container state as Kubernetes reports it, the restart decision and the pod phase (pure).

Times are epoch seconds (Clock.wall()) and become RFC 3339 strings ("2024-05-01T12:00:00Z",
whole seconds like metav1.Time) only in `to_status_dict()`.

Exit statuses: a normal exit gives its code; death by signal N gives exitCode 128+N and
signal N (what a shell and containerd report: SIGKILL -> 137, SIGTERM -> 143). The reason is
OOMKilled when the container cgroup's oom_kill counter grew while it ran, otherwise Completed for
exit 0 and Error for anything else. A process whose exit could not be read (re-adopted after an
agent restart: it is not our child, so waitpid cannot see its status) is reported as the kubelet
reports a container it lost: exitCode 137, reason ContainerStatusUnknown. It counts as a failure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.core.timefmt import rfc3339

RESTART_POLICIES = ("Always", "OnFailure", "Never")

REASON_CREATING = "ContainerCreating"
REASON_CRASH_LOOP = "CrashLoopBackOff"
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_OOM = "OOMKilled"
REASON_UNKNOWN = "ContainerStatusUnknown"
REASON_START_ERROR = "StartError"  # the process could not be started at all (containerd's word)
START_ERROR_EXIT_CODE = 128
UNKNOWN_EXIT_CODE = 137
UNKNOWN_MESSAGE = "The container exited while the agent was not its parent; its exit status could not be read"


@dataclass(frozen=True)
class Waiting:
    reason: str = REASON_CREATING
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"reason": self.reason}
        if self.message:
            out["message"] = self.message
        return {"waiting": out}


@dataclass(frozen=True)
class Running:
    started_at: float

    def to_dict(self) -> dict[str, object]:
        return {"running": {"startedAt": rfc3339(self.started_at)}}


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    started_at: float | None
    finished_at: float | None
    signal: int | None = None
    message: str = ""
    container_id: str = ""

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"exitCode": self.exit_code, "reason": self.reason}
        if self.signal is not None:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        out["startedAt"] = rfc3339(self.started_at)
        out["finishedAt"] = rfc3339(self.finished_at)
        if self.container_id:
            out["containerID"] = self.container_id
        return {"terminated": out}


ContainerState = Waiting | Running | Terminated


@dataclass(frozen=True)
class ContainerStatus:
    """One entry of status.containerStatuses."""

    name: str
    state: ContainerState = field(default_factory=Waiting)
    last_state: Terminated | None = None
    restart_count: int = 0
    image: str = ""
    container_id: str = ""

    @property
    def ready(self) -> bool:
        """No readiness probes yet: a running container is ready, as the kubelet does then."""
        return isinstance(self.state, Running)

    @property
    def started(self) -> bool:
        return isinstance(self.state, Running)

    def to_status_dict(self, *, ready: bool | None = None, started: bool | None = None) -> dict[str, object]:
        """`ready` / `started`: the prober's view (readiness and startup probes) when the pod
        worker has one; without it a running container is both."""
        out: dict[str, object] = {
            "name": self.name,
            "state": self.state.to_dict(),
            "lastState": self.last_state.to_dict() if self.last_state else {},
            "ready": self.ready if ready is None else ready,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": "",
            "started": self.started if started is None else started,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def reap_exit_code(pid: int) -> int | None:
    """The exit code of the agent's child `pid` if it has ended (reaped now), else None (still
    running); one reaped elsewhere already reads 0. Called when its pidfd turns readable."""
    try:
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    if wpid == 0:
        return None
    return decode_wait_status(status)[0]


def decode_wait_status(status: int) -> tuple[int, int | None]:
    """(exitCode, signal) from a waitpid status: a signal death is 128+sig with signal set."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return 128 + sig, sig
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    raise ValueError(f"status: {status:#x} is neither an exit nor a signal death")


def terminated(
    exit_code: int,
    signal: int | None,
    started_at: float | None,
    finished_at: float | None,
    oom_kills_before: int | None = None,
    oom_kills_after: int | None = None,
    container_id: str = "",
) -> Terminated:
    """The Terminated state for an exit, deciding the reason (OOMKilled / Completed / Error)."""
    oom = (
        oom_kills_before is not None
        and oom_kills_after is not None
        and oom_kills_after > oom_kills_before
    )
    if oom:
        reason = REASON_OOM
    elif exit_code == 0:
        reason = REASON_COMPLETED
    else:
        reason = REASON_ERROR
    return Terminated(exit_code, reason, started_at, finished_at, signal, "", container_id)


def unknown_exit(started_at: float | None, finished_at: float | None, container_id: str = "") -> Terminated:
    """The state of a process that exited while we could not read its status."""
    return Terminated(
        UNKNOWN_EXIT_CODE, REASON_UNKNOWN, started_at, finished_at, None, UNKNOWN_MESSAGE, container_id
    )


def should_restart(policy: str, last: Terminated) -> bool:
    """Restart per policy: Always always; OnFailure on non-zero exit (a signal death is 128+N); Never never."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return last.failed
    if policy == "Never":
        return False
    raise ValueError(f"restartPolicy: {policy!r} is not one of {', '.join(RESTART_POLICIES)}")


def crash_loop_message(delay_text: str, container: str, pod_name: str, pod_namespace: str, pod_uid: str) -> str:
    """kuberuntime doBackOff's message; format.Pod(pod) is name_namespace(uid)."""
    return f"back-off {delay_text} restarting failed container={container} pod={pod_name}_{pod_namespace}({pod_uid})"


def pod_phase(
    restart_policy: str,
    container_names: Sequence[str],
    statuses: Mapping[str, ContainerStatus],
    pod_is_terminal: bool = False,
    is_static: bool = False,
) -> str:
    """The pod phase as the kubelet's getPhase computes it for regular containers (no init containers).

    A spec container without a status counts as unknown. Pending while any container waits
    without having terminated before; Running while any runs and none is unknown; once all have
    stopped: Running under Always (they are restarting), Succeeded when all stopped in success,
    Failed under Never, Running under OnFailure (restarting the failed ones). A terminal pod
    (being deleted/evicted, not static) is Succeeded or Failed whatever the policy.
    """
    if restart_policy not in RESTART_POLICIES:
        raise ValueError(f"restartPolicy: {restart_policy!r} is not one of {', '.join(RESTART_POLICIES)}")
    unknown = running = waiting = stopped = succeeded = 0
    for name in container_names:
        cs = statuses.get(name)
        if cs is None:
            unknown += 1
            continue
        state = cs.state
        if isinstance(state, Running):
            running += 1
        elif isinstance(state, Terminated):
            stopped += 1
            if state.exit_code == 0:
                succeeded += 1
        elif isinstance(state, Waiting):
            if cs.last_state is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if pod_is_terminal and not is_static:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"
