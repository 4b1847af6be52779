"""Lifecycle hooks: postStart/preStop with exec (a real short process, no cgroup), httpGet
(a real server on loopback), sleep (fake), their kubelet messages and events, and preStop's
share of the grace period on a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from nodeagent.agent.lifecycle.hooks import (
    FAILED_POST_START,
    FAILED_PRE_STOP,
    MINIMUM_GRACE_PERIOD_S,
    HookRunner,
    HookTarget,
)
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.probes.http_probe import HttpProber
from nodeagent.agent.probes.state import Event
from nodeagent.core.clock import FakeClock
from nodeagent.core.model import parse_pod


def target(lifecycle: dict[str, Any], *, running: bool = True, grace: int = 30, **container: Any) -> HookTarget:
    pod = parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "uid": "u-1"}, "spec": {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "app", "command": ["x"], "lifecycle": lifecycle, **container}]}})
    exec_target = ExecTarget(cgroup=None, env={"PATH": "/usr/bin:/bin", "WHO": "hook"}) if running else None
    return HookTarget(pod, pod.spec.containers[0], exec_target)


class FakeSleep:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)


async def test_post_start_exec_success_and_failure_message() -> None:
    runner = HookRunner(HttpProber(), clock=FakeClock())
    ok = await runner.post_start(target({"postStart": {"exec": {"command": ["/bin/sh", "-c", "test $WHO = hook"]}}}))
    assert ok.ok and not ok.kill and ok.events == ()
    bad = await runner.post_start(target({"postStart": {"exec": {"command": ["/bin/sh", "-c", "echo nope; exit 3"]}}}))
    assert bad.kill
    assert bad.message == ('Exec lifecycle hook ([/bin/sh -c echo nope; exit 3]) for Container "app" in Pod '
                           '"web_default(u-1)" failed - error: command \'/bin/sh -c echo nope; exit 3\' exited with 3: , '
                           'message: "nope\\n"')
    assert bad.events == (Event(FAILED_POST_START, bad.message), Event("Killing", FAILED_POST_START, "Normal"))


async def test_exec_hook_on_a_container_that_is_not_running() -> None:
    runner = HookRunner(HttpProber(), clock=FakeClock())
    res = await runner.post_start(target({"postStart": {"exec": {"command": ["true"]}}}, running=False))
    assert not res.ok and "container is not running" in res.message


async def test_http_hook_needs_a_response_not_a_2xx(aiohttp_server: Any) -> None:
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers["User-Agent"]))
        return web.Response(status=500)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    server = await aiohttp_server(app)
    http = HttpProber()
    runner = HookRunner(http, clock=FakeClock())
    ok = await runner.post_start(target({"postStart": {"httpGet": {"path": "/started", "port": server.port}}}))
    assert ok.ok  # the kubelet checks only that a response came
    assert seen == [("/started", "kube-lifecycle/0.1")]
    refused = await runner.post_start(target({"postStart": {"httpGet": {"path": "/x", "port": 1}}}))
    assert not refused.ok
    assert refused.message.startswith('HTTP lifecycle hook (/x) for Container "app" in Pod "web_default(u-1)" failed - error: ')
    named = await runner.post_start(target({"postStart": {"httpGet": {"path": "/n", "port": "web"}}},
                                           ports=[{"name": "web", "containerPort": server.port}]))
    assert named.ok and seen[-1][0] == "/n"
    await http.close()


async def test_pre_stop_counts_against_the_grace_period() -> None:
    clock = FakeClock()
    sleep = FakeSleep(clock)
    runner = HookRunner(HttpProber(), clock=clock, sleep=sleep)
    res = await runner.pre_stop(target({"preStop": {"sleep": {"seconds": 12}}}), 30)
    assert (res.elapsed, res.grace_left, res.events, res.completed) == (12, 18, (), True)
    res = await runner.pre_stop(target({"preStop": {"sleep": {"seconds": 29}}}), 30)
    assert res.grace_left == MINIMUM_GRACE_PERIOD_S  # never less than 2 s for SIGTERM -> SIGKILL
    none = await runner.pre_stop(target({}), 30)
    assert (none.elapsed, none.grace_left) == (0, 30)
    zero = await runner.pre_stop(target({"preStop": {"sleep": {"seconds": 0}}}, grace=0), 0)
    assert sleep.slept == [12.0, 29.0] and zero.grace_left == MINIMUM_GRACE_PERIOD_S


async def test_pre_stop_failure_event_hides_the_output_and_a_slow_hook_is_cut_off() -> None:
    runner = HookRunner(HttpProber(), clock=FakeClock())
    res = await runner.pre_stop(target({"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo SECRET; exit 1"]}}}), 30)
    assert res.events == (Event(FAILED_PRE_STOP, "PreStopHook failed"),)
    loop = asyncio.get_running_loop()
    started = loop.time()
    slow = await runner.pre_stop(target({"preStop": {"exec": {"command": ["/bin/sleep", "30"]}}}, grace=1), 1)
    assert not slow.completed and loop.time() - started < 10
    assert slow.events == ()


async def test_tcp_socket_handler_cannot_run() -> None:
    runner = HookRunner(HttpProber(), clock=FakeClock())
    res = await runner.post_start(target({"postStart": {"tcpSocket": {"port": 80}}}))
    assert not res.ok and res.message.startswith("Cannot run handler: invalid handler: ")
