"""The probes of one pod: a runner per probe, each container's started/ready, the pod's conditions.

This is the piece the pod worker owns (one per pod). It reads container statuses through a
callable (the worker's supervisors are the truth), runs one task per probe through the task
spawner the composition root hands it (so the tasks are guarded and surfaced like every other
long-lived task), and reports back through three callbacks:

    on_event(container, Event)              Unhealthy, ProbeWarning, Killing: to the EventRecorder
    on_kill(container, message, grace)      a liveness/startup failure: stop the container with
                                            `grace` (the probe's terminationGracePeriodSeconds, or
                                            None for the pod's); its restart policy then applies
    on_change()                             started/ready moved: the pod's status is to be re-read

Executors by handler: exec runs in the container (ExecTarget from `exec_target(container)`, None
while it is not running: the attempt then could not run), httpGet/tcpSocket/grpc go to the
action's host or the pod IP (127.0.0.1 for host-process pods) and the port by number or name.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nodeagent.agent.probes.exec_probe import ExecTarget, exec_probe
from nodeagent.agent.probes.http_probe import HttpProber, probe_url, request_headers
from nodeagent.agent.probes.readiness import (
    Condition,
    ContainerFacts,
    container_ready,
    container_started,
    init_container_ready,
    pod_conditions,
)
from nodeagent.agent.probes.results import ProbeOutcome, Result, unknown
from nodeagent.agent.probes.runner import Executor, ProbeRunner, Timer, loop_timer
from nodeagent.agent.probes.state import ContainerView, Event, ProbeState, Step
from nodeagent.agent.probes.target import HOST_PROCESS_POD_IP, PortNotFound, probe_host, resolve_port
from nodeagent.agent.probes.tcp_probe import tcp_probe
from nodeagent.agent.runtime.state import ContainerStatus, Running, Terminated
from nodeagent.core.clock import Clock
from nodeagent.core.expansion import expand
from nodeagent.core.model.pod import Container, Pod
from nodeagent.core.model.probe import Probe, ProbeKind

TaskSpawner = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


@dataclass(frozen=True)
class ProbeContext:
    http: HttpProber
    exec_target: Callable[[str], ExecTarget | None]
    pod_ip: str = HOST_PROCESS_POD_IP


def exec_command(command: list[str], container: Container) -> list[str]:
    """ExpandContainerCommandOnlyStatic: $(VAR) of the container's literal env values only."""
    static = {e.name: e.value for e in container.env if e.value_from is None}
    return [expand(arg, static) for arg in command]


def unresolved(outcome: ProbeOutcome) -> Executor:
    """An executor for a probe that cannot run as specified (a named port the container lacks):
    every attempt is that outcome, reported and not counted."""

    async def run(timeout_seconds: float) -> ProbeOutcome:
        return outcome

    return run


def make_executor(probe: Probe, container: Container, ctx: ProbeContext) -> Executor:
    """The I/O of one probe, as a coroutine function of its timeout."""
    action = probe.handler
    if probe.exec is not None:
        command = exec_command(probe.exec.command, container)

        async def run_exec(timeout_seconds: float) -> ProbeOutcome:
            target = ctx.exec_target(container.name)
            if target is None:
                return unknown("container is not running")
            return await exec_probe(command, target, timeout_seconds)

        return run_exec

    try:  # the container's spec does not change: its port is resolved once
        port = resolve_port(action.port, container)  # type: ignore[union-attr]
    except PortNotFound as e:
        return unresolved(unknown(str(e)))
    if probe.http_get is not None:
        get = probe.http_get
        headers, host_header = request_headers([(h.name, h.value) for h in get.http_headers])
        try:
            url = probe_url(get.scheme, probe_host(get.host, ctx.pod_ip), port, get.path)
        except ValueError as e:
            return unresolved(unknown(f"invalid URL: {e}"))

        async def run_http(timeout_seconds: float) -> ProbeOutcome:
            return await ctx.http.probe(url, headers, host_header, timeout_seconds)

        return run_http
    if probe.tcp_socket is not None:
        host = probe_host(probe.tcp_socket.host, ctx.pod_ip)

        async def run_tcp(timeout_seconds: float) -> ProbeOutcome:
            return await tcp_probe(host, port, timeout_seconds)

        return run_tcp
    assert probe.grpc is not None
    service = probe.grpc.service
    # imported for the first gRPC probe only: h2, hpack and hyperframe are ~2 MiB of resident
    # memory that an agent without gRPC probes does not carry
    from nodeagent.agent.probes.grpc_probe import grpc_probe

    async def run_grpc(timeout_seconds: float) -> ProbeOutcome:
        return await grpc_probe(ctx.pod_ip, port, service, timeout_seconds)

    return run_grpc


class PodProbes:
    def __init__(
        self,
        pod: Pod,
        ctx: ProbeContext,
        *,
        status: Callable[[str], ContainerStatus | None],
        deleting: Callable[[], bool],
        on_event: Callable[[str, Event], None],
        on_kill: Callable[[str, str, int | None], None],
        on_change: Callable[[], None],
        clock: Clock,
        timer: Timer = loop_timer,
        terminal: Callable[[], bool] = lambda: False,
        spread: random.Random | None = None,
    ) -> None:
        """`spread`: pass a Random for pods adopted right after an agent start, to spread their
        first probes over one period (the kubelet sleeps a random part of the period when it has
        just started), so a restart does not probe every pod in the same instant."""
        self.pod = pod
        self._status = status
        self._deleting = deleting
        self._terminal = terminal
        self._on_event = on_event
        self._on_kill = on_kill
        self._on_change = on_change
        self._clock = clock
        self.runners: dict[tuple[str, ProbeKind], ProbeRunner] = {}
        self._tasks: list[asyncio.Task[None]] = []
        never = pod.spec.restart_policy == "Never"
        containers = [*(c for c in pod.spec.init_containers if c.is_sidecar), *pod.spec.containers]
        for c in containers:
            for kind, probe in (("startup", c.startup_probe), ("liveness", c.liveness_probe),
                                ("readiness", c.readiness_probe)):
                if probe is None:
                    continue
                first = clock.now() + (spread.random() * probe.period_seconds if spread is not None else 0.0)
                state = ProbeState(kind, probe, c.name, start=first,  # type: ignore[arg-type]
                                   restart_on_failure=c.is_sidecar or not never)
                self.runners[(c.name, kind)] = ProbeRunner(  # type: ignore[index]
                    state, make_executor(probe, c, ctx), self._viewer(c.name), self._step, clock=clock, timer=timer)

    # ---- what the pod worker reads ----
    def result(self, container: str, kind: ProbeKind) -> Result | None:
        runner = self.runners.get((container, kind))
        return runner.state.result if runner is not None else None

    def started(self, container: str) -> bool:
        has = (container, "startup") in self.runners
        return container_started(self._status(container), self.result(container, "startup"), has)

    def ready(self, container: str) -> bool:
        if any(c.name == container and not c.is_sidecar for c in self.pod.spec.init_containers):
            return init_container_ready(self._status(container))
        has = (container, "readiness") in self.runners
        readiness = self.result(container, "readiness")
        return container_ready(self._status(container), self.started(container), readiness, has)

    def conditions(self, phase: str, previous: list[Condition], now: float) -> list[Condition]:
        facts = {c.name: ContainerFacts(self._status(c.name), self.started(c.name), self.ready(c.name))
                 for c in [*self.pod.spec.init_containers, *self.pod.spec.containers]}
        return pod_conditions(self.pod.spec, facts, phase, previous, now)

    def container_changed(self, container: str) -> None:
        """A container's status moved (started, restarted): probe it now rather than a period later."""
        for (name, _), runner in self.runners.items():
            if name == container:
                runner.trigger()

    # ---- lifecycle ----
    def start(self, spawn_task: TaskSpawner) -> None:
        for (name, kind), runner in self.runners.items():
            task_name = f"probe {self.pod.key}/{name} {kind}"
            self._tasks.append(spawn_task(runner.run(), task_name))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- internals ----
    def _viewer(self, name: str) -> Callable[[], ContainerView]:
        def view() -> ContainerView:
            st = self._status(name)
            if st is None:
                return ContainerView(pod_terminal=self._terminal())
            state = st.state
            return ContainerView(
                container_id=st.container_id,
                running=isinstance(state, Running),
                started_at=state.started_at if isinstance(state, Running) else None,
                started=self.started(name),
                terminated=isinstance(state, Terminated),
                pod_terminal=self._terminal(),
                deleting=self._deleting(),
            )

        return view

    def _step(self, state: ProbeState, step: Step) -> None:
        for event in step.events:
            self._on_event(state.container, event)
        if step.kill:
            message = next((e.message for e in step.events if e.reason == "Killing"), "")
            self._on_kill(state.container, message, step.kill_grace_period)
        if step.published is not None:
            if state.kind == "startup" and step.published is Result.SUCCESS:
                for (name, kind), runner in self.runners.items():  # started: liveness/readiness may begin
                    if name == state.container and kind != "startup":
                        runner.trigger()
            self._on_change()

