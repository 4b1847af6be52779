"""postStart and preStop hooks, as the kubelet's handler runner and its callers run them.

postStart runs right after the container's process started and is bounded by nothing (the
kubelet passes no timeout); the pod worker waits for it before it starts the next container. A
failure is the event FailedPostStartHook with the handler's message, then the container is
killed (event Killing, message "FailedPostStartHook") and its restart policy applies.

preStop runs before the SIGTERM and counts against the grace period: it gets at most the whole
grace period; what it used (whole seconds, as the kubelet counts them) is taken off, and the
SIGTERM-to-SIGKILL wait that follows is never shorter than 2 s (minimumGracePeriodInSeconds).
A failure is the event FailedPreStopHook with the kubelet's message "PreStopHook failed" (the
handler's output stays out of the event, so secrets cannot leak into it). A hook still running
when its time is up is cancelled: an exec hook's process group is killed.

Handlers: exec runs in the container's cgroup with its env (probes.exec_probe); httpGet sends
one GET to the action's host or the pod IP (the status code is not checked, only that a response
came, as the kubelet); sleep sleeps; tcpSocket is accepted by the API but cannot run (`Cannot run
handler: ...`). Messages are the kubelet's, e.g. `Exec lifecycle hook ([sh -c exit 3]) for
Container "app" in Pod "web_default(uid)" failed - error: command 'sh -c exit 3' exited with 3: ,
message: "..."`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from nodeagent.agent.probes.exec_probe import ExecTarget, run_in_container
from nodeagent.agent.probes.http_probe import (
    USER_AGENT,
    HttpProber,
    ProtocolError,
    TooManyRedirects,
    probe_url,
    request_headers,
)
from nodeagent.agent.probes.pod_probes import exec_command
from nodeagent.agent.probes.state import Event
from nodeagent.agent.probes.target import HOST_PROCESS_POD_IP, PortNotFound, probe_host, resolve_port
from nodeagent.core.clock import Clock
from nodeagent.core.model.lifecycle import LifecycleHandler
from nodeagent.core.model.pod import Container, Pod

log = structlog.get_logger(__name__)

FAILED_POST_START = "FailedPostStartHook"
FAILED_PRE_STOP = "FailedPreStopHook"
POST_START_HOOK_ERROR = "PostStartHookError"  # the start error's reason (kuberuntime ErrPostStartHook)
MINIMUM_GRACE_PERIOD_S = 2
LIFECYCLE_USER_AGENT = USER_AGENT.replace("kube-probe/", "kube-lifecycle/")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class HookTarget:
    pod: Pod
    container: Container
    exec_target: ExecTarget | None  # None when the container is not running
    pod_ip: str = HOST_PROCESS_POD_IP


@dataclass(frozen=True)
class PostStartResult:
    ok: bool
    message: str = ""
    events: tuple[Event, ...] = ()

    @property
    def kill(self) -> bool:
        return not self.ok


@dataclass(frozen=True)
class PreStopResult:
    elapsed: int  # whole seconds the hook took, as the kubelet counts them
    grace_left: int  # what remains for SIGTERM -> SIGKILL, at least MINIMUM_GRACE_PERIOD_S
    events: tuple[Event, ...] = ()
    completed: bool = True


def pod_ref(pod: Pod) -> str:
    """format.Pod: name_namespace(uid)."""
    return f"{pod.metadata.name}_{pod.metadata.namespace}({pod.metadata.uid})"


class HookRunner:
    def __init__(self, http: HttpProber, *, clock: Clock, sleep: Sleep = asyncio.sleep) -> None:
        self._http = http
        self._clock = clock
        self._sleep = sleep

    async def run(
        self, handler: LifecycleHandler, target: HookTarget, timeout_seconds: float | None = None
    ) -> str | None:
        """Run one handler; None on success, else the kubelet's message for its failure."""
        c, pod = target.container, pod_ref(target.pod)
        if handler.exec is not None:
            command = exec_command(handler.exec.command, c)
            shown = "[" + " ".join(command) + "]"
            if target.exec_target is None:
                return (f'Exec lifecycle hook ({shown}) for Container "{c.name}" in Pod "{pod}" failed - '
                        'error: container is not running, message: ""')
            try:
                res = await run_in_container(command, target.exec_target, timeout_seconds)
            except (OSError, ValueError) as e:
                error, output = str(e), b""
            else:
                if res.exit_code == 0:
                    return None
                output = res.output
                joined = " ".join(command)
                if res.timed_out:
                    error = f"command '{joined}' timed out"
                else:
                    error = f"command '{joined}' exited with {res.exit_code}: "
            text = output.decode("utf-8", "replace")
            return (f'Exec lifecycle hook ({shown}) for Container "{c.name}" in Pod "{pod}" failed - '
                    f"error: {error}, message: {_go_quote(text)}")
        if handler.http_get is not None:
            get = handler.http_get
            try:
                port = resolve_port(get.port, c)
                headers, host_header = request_headers([(h.name, h.value) for h in get.http_headers],
                                                       LIFECYCLE_USER_AGENT)
                url = probe_url(get.scheme, probe_host(get.host, target.pod_ip), port, get.path)
                await self._http.get(url, headers, host_header, timeout_seconds if timeout_seconds else 1e9)
            except (PortNotFound, ProtocolError, TooManyRedirects, OSError, TimeoutError) as e:
                detail = str(e) or type(e).__name__
                return (f'HTTP lifecycle hook ({get.path}) for Container "{c.name}" in Pod "{pod}" failed - '
                        f"error: {detail}")
            return None
        if handler.sleep is not None:
            await self._sleep(float(handler.sleep.seconds))
            return None
        return f"Cannot run handler: invalid handler: {handler.model_dump(by_alias=True, exclude_none=True)}"

    async def post_start(self, target: HookTarget) -> PostStartResult:
        lifecycle = target.container.lifecycle
        if lifecycle is None or lifecycle.post_start is None:
            return PostStartResult(True)
        message = await self.run(lifecycle.post_start, target)
        if message is None:
            return PostStartResult(True)
        log.info("post_start_hook_failed", pod=target.pod.key, container=target.container.name)
        return PostStartResult(False, message, (Event(FAILED_POST_START, message),
                                                Event("Killing", FAILED_POST_START, "Normal")))

    async def pre_stop(self, target: HookTarget, grace_period: int) -> PreStopResult:
        """Run preStop within `grace_period`; returns what is left of it for the SIGTERM wait."""
        lifecycle = target.container.lifecycle
        if lifecycle is None or lifecycle.pre_stop is None or grace_period <= 0:
            return PreStopResult(0, max(grace_period, MINIMUM_GRACE_PERIOD_S))
        start = self._clock.now()
        events: tuple[Event, ...] = ()
        completed = True
        try:
            async with asyncio.timeout(grace_period):
                message = await self.run(lifecycle.pre_stop, target, grace_period)
        except TimeoutError:
            completed, message = False, None
            log.info("pre_stop_hook_timed_out", pod=target.pod.key, container=target.container.name,
                     grace_period=grace_period)
        if message is not None:
            log.info("pre_stop_hook_failed", pod=target.pod.key, container=target.container.name)
            events = (Event(FAILED_PRE_STOP, "PreStopHook failed"),)
        elapsed = int(self._clock.now() - start)
        return PreStopResult(elapsed, max(grace_period - elapsed, MINIMUM_GRACE_PERIOD_S), events, completed)


def _go_quote(text: str) -> str:
    """Go's %q of a string (close enough: JSON escaping without the non-ASCII escapes)."""
    return json.dumps(text, ensure_ascii=False)
