"""Container states as Kubernetes reports them, restart decisions and getPhase."""

from __future__ import annotations

import os
import signal

import pytest

from nodeagent.agent.runtime.state import (
    ContainerStatus,
    Running,
    Terminated,
    Waiting,
    decode_wait_status,
    pod_phase,
    rfc3339,
    should_restart,
    terminated,
    unknown_exit,
)

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def exited(code: int) -> int:
    """A waitpid status for a normal exit."""
    return code << 8


def test_rfc3339_whole_seconds_utc() -> None:
    assert rfc3339(T0) == "2023-11-14T22:13:20Z"
    assert rfc3339(T0 + 0.9) == "2023-11-14T22:13:20Z"
    assert rfc3339(None) is None


def test_decode_wait_status() -> None:
    assert decode_wait_status(exited(0)) == (0, None)
    assert decode_wait_status(exited(3)) == (3, None)
    assert decode_wait_status(signal.SIGKILL) == (137, 9)
    assert decode_wait_status(signal.SIGTERM) == (143, 15)
    assert os.WIFSIGNALED(signal.SIGKILL)
    with pytest.raises(ValueError):
        decode_wait_status(0x137F)  # stopped, not exited


@pytest.mark.parametrize(
    "code,sig,before,after,reason",
    [
        (0, None, 0, 0, "Completed"),
        (1, None, 0, 0, "Error"),
        (137, 9, 0, 0, "Error"),  # killed, but not by the OOM killer
        (137, 9, 2, 3, "OOMKilled"),
        (1, None, 2, 3, "OOMKilled"),  # a child was OOM-killed and the main process failed
        (0, None, 5, 5, "Completed"),
        (137, 9, None, 4, "Error"),  # counter unreadable: never guess OOM
    ],
)
def test_terminated_reason(code: int, sig: int | None, before: int | None, after: int, reason: str) -> None:
    t = terminated(code, sig, T0, T0 + 5, before, after)
    assert t.reason == reason
    assert t.exit_code == code and t.signal == sig


def test_terminated_to_dict() -> None:
    t = terminated(137, 9, T0, T0 + 61, 0, 1, container_id="nodeagent://42@7")
    assert t.to_dict() == {
        "terminated": {
            "exitCode": 137,
            "reason": "OOMKilled",
            "signal": 9,
            "startedAt": "2023-11-14T22:13:20Z",
            "finishedAt": "2023-11-14T22:14:21Z",
            "containerID": "nodeagent://42@7",
        }
    }
    assert "signal" not in terminated(0, None, T0, T0).to_dict()["terminated"]


def test_unknown_exit_is_the_kubelets_lost_container() -> None:
    u = unknown_exit(T0, T0 + 1)
    assert (u.exit_code, u.reason) == (137, "ContainerStatusUnknown")
    assert u.failed
    assert should_restart("OnFailure", u)
    assert not should_restart("Never", u)


def test_status_dict_running() -> None:
    cs = ContainerStatus("app", Running(T0), restart_count=2, image="busybox", container_id="nodeagent://9@1")
    assert cs.to_status_dict() == {
        "name": "app",
        "state": {"running": {"startedAt": "2023-11-14T22:13:20Z"}},
        "lastState": {},
        "ready": True,
        "restartCount": 2,
        "image": "busybox",
        "imageID": "",
        "started": True,
        "containerID": "nodeagent://9@1",
    }


def test_status_dict_crash_loop() -> None:
    last = terminated(1, None, T0, T0 + 2)
    msg = "back-off 20s restarting failed container=app pod=web_default(u1)"
    cs = ContainerStatus("app", Waiting("CrashLoopBackOff", msg), last_state=last, restart_count=3)
    d = cs.to_status_dict()
    assert d["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
    assert d["lastState"] == {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": "2023-11-14T22:13:20Z",
            "finishedAt": "2023-11-14T22:13:22Z",
        }
    }
    assert d["ready"] is False and d["started"] is False and d["restartCount"] == 3


def test_initial_status_is_container_creating() -> None:
    d = ContainerStatus("app").to_status_dict()
    assert d["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert d["ready"] is False and d["restartCount"] == 0


@pytest.mark.parametrize(
    "policy,code,sig,restart",
    [
        ("Always", 0, None, True),
        ("Always", 1, None, True),
        ("OnFailure", 0, None, False),
        ("OnFailure", 2, None, True),
        ("OnFailure", 143, 15, True),
        ("Never", 1, None, False),
        ("Never", 137, 9, False),
        ("Never", 0, None, False),
    ],
)
def test_should_restart(policy: str, code: int, sig: int | None, restart: bool) -> None:
    assert should_restart(policy, terminated(code, sig, T0, T0)) is restart


def test_should_restart_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="restartPolicy"):
        should_restart("Sometimes", terminated(0, None, T0, T0))


# ---- getPhase ----
RUN = ContainerStatus("x", Running(T0))
OK = ContainerStatus("x", terminated(0, None, T0, T0 + 1))
FAIL = ContainerStatus("x", terminated(1, None, T0, T0 + 1))
CREATING = ContainerStatus("x", Waiting())
LOOP_AFTER_FAIL = ContainerStatus("x", Waiting("CrashLoopBackOff", "m"), last_state=FAIL.state)  # type: ignore[arg-type]
LOOP_AFTER_OK = ContainerStatus("x", Waiting("CrashLoopBackOff", "m"), last_state=OK.state)  # type: ignore[arg-type]


def phase(policy: str, *states: ContainerStatus | None, terminal: bool = False, static: bool = False) -> str:
    names = [f"c{i}" for i in range(len(states))]
    statuses = {n: s for n, s in zip(names, states, strict=False) if s is not None}
    return pod_phase(policy, names, statuses, pod_is_terminal=terminal, is_static=static)


@pytest.mark.parametrize(
    "policy,states,expected",
    [
        ("Always", (CREATING,), "Pending"),
        ("Always", (RUN, CREATING), "Pending"),  # one container not started yet
        ("Always", (RUN,), "Running"),
        ("Always", (RUN, None), "Pending"),  # a container without status is unknown
        ("Always", (RUN, OK), "Running"),
        ("Always", (OK,), "Running"),  # all stopped, but Always restarts them
        ("Always", (FAIL,), "Running"),
        ("Always", (LOOP_AFTER_FAIL,), "Running"),  # waiting after a termination counts as stopped
        ("OnFailure", (OK, OK), "Succeeded"),
        ("OnFailure", (OK, FAIL), "Running"),  # the failed one is restarting
        ("OnFailure", (LOOP_AFTER_FAIL,), "Running"),
        ("Never", (OK, OK), "Succeeded"),
        ("Never", (OK, FAIL), "Failed"),
        ("Never", (RUN, FAIL), "Running"),
        ("Never", (LOOP_AFTER_OK,), "Failed"),  # stopped but not counted as succeeded (kubelet quirk)
        ("Always", (None,), "Pending"),
        ("Never", (), "Pending"),
    ],
)
def test_pod_phase(policy: str, states: tuple[ContainerStatus | None, ...], expected: str) -> None:
    assert phase(policy, *states) == expected


def test_terminal_pod_phase_ignores_policy_unless_static() -> None:
    assert phase("Always", OK, OK, terminal=True) == "Succeeded"
    assert phase("Always", OK, FAIL, terminal=True) == "Failed"
    assert phase("Always", OK, FAIL, terminal=True, static=True) == "Running"
    assert phase("Always", RUN, terminal=True) == "Running"  # still running: not decided yet


def test_pod_phase_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="restartPolicy"):
        phase("Sometimes", RUN)


def test_states_are_values() -> None:
    assert Terminated(0, "Completed", T0, T0) == Terminated(0, "Completed", T0, T0)
    assert Waiting() == Waiting("ContainerCreating", "")
