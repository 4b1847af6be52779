"""Container lifecycle hooks (postStart, preStop): the model and Kubernetes' checks.

A handler is one of exec, httpGet, sleep, or tcpSocket; Kubernetes keeps tcpSocket only for
backward compatibility (accepted, never validated, fails when run), and so do we. A sleep must
lie within the pod's terminationGracePeriodSeconds (zero allowed, as PodLifecycleSleepActionAllowZero).
"""

from __future__ import annotations

from nodeagent.core.errors import FieldError
from nodeagent.core.model.actions import (
    ExecAction,
    HTTPGetAction,
    SleepAction,
    TCPSocketAction,
    handler_errors,
)
from nodeagent.core.model.base import KubeModel

# validateLifecycleHandler counts tcpSocket too (so two handlers are refused), but never checks it.
LIFECYCLE_HANDLERS = ("exec", "http_get", "tcp_socket", "sleep")


class LifecycleHandler(KubeModel):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    sleep: SleepAction | None = None


class Lifecycle(KubeModel):
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None


def lifecycle_errors(path: str, lifecycle: Lifecycle, grace_period: int | None) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, alias in (("post_start", "postStart"), ("pre_stop", "preStop")):
        handler = getattr(lifecycle, name)
        if handler is None:
            continue
        where = f"{path}.{alias}"
        if handler.tcp_socket is not None and sum(
            getattr(handler, k) is not None for k in LIFECYCLE_HANDLERS
        ) == 1:
            continue  # accepted unchecked, as Kubernetes does
        errs += handler_errors(where, handler, LIFECYCLE_HANDLERS, grace_period)
    return errs
