"""The agent's side of registration (nodeagent/node/registration.py) against a fake scheduler, and
end to end against the real scheduler API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs
from test_scheduler_support import FakeAgents, make_service, node_report

from nodeagent.agent.api.registration import Registration, agent_api_url, registration_loop, status_body
from nodeagent.agent.config.settings import Config, parse_config
from nodeagent.cluster.apiserver.app import create_app


def config(**kw: Any) -> Config:
    return parse_config({"nodeName": "n1", **kw}, "test")


@pytest.fixture
async def fake_scheduler() -> Any:
    seen: list[tuple[str, dict[str, Any], str | None]] = []
    state = {"status": 200}

    async def report(request: web.Request) -> web.Response:
        seen.append((request.match_info["name"], await request.json(), request.headers.get("Authorization")))
        return web.json_response({"kind": "Node"}, status=state["status"])

    app = web.Application()
    app.router.add_post("/api/v1/nodes/{name}/status", report)
    server = TestServer(app)
    await server.start_server()
    try:
        yield server, seen, state
    finally:
        await server.close()


def test_agent_api_url() -> None:
    assert agent_api_url(config(port=10250), 10250) == "http://127.0.0.1:10250"
    assert agent_api_url(config(address="0.0.0.0"), 4000, [{"type": "Hostname", "address": "h1"},
                                                          {"type": "InternalIP", "address": "10.0.0.5"}]) \
        == "http://10.0.0.5:4000"
    assert agent_api_url(config(address="::", authentication="none"), 5, []) == "http://127.0.0.1:5"
    assert agent_api_url(config(address="::1"), 5) == "http://[::1]:5"
    tls = config(tlsCertFile="/c.pem", tlsPrivateKeyFile="/k.pem")
    assert agent_api_url(tls, 6) == "https://127.0.0.1:6"


def test_status_body_adds_the_url_without_changing_the_node() -> None:
    node = node_report("n1")
    body = status_body(node, "http://x:1")
    assert body["metadata"]["annotations"] == {"nodeagent.io/api-url": "http://x:1"}
    assert "annotations" not in node["metadata"] and body["status"] is node["status"]


async def test_loop_reports_at_start_and_every_period_with_the_token(fake_scheduler: Any, tmp_path: Path) -> None:
    server, seen, _ = fake_scheduler
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    cfg = config(schedulerURL=str(server.make_url("")), schedulerTokenFile=str(token),
                 nodeStatusUpdateFrequency="7s")
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            token.write_text("tok-2")  # rotated: the next report uses the new one
        if len(sleeps) == 3:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        await registration_loop(lambda: cfg, lambda: node_report("n1"), lambda: 10250, sleep=fake_sleep)
    assert sleeps == [7.0, 7.0, 7.0]
    assert [(name, auth) for name, _, auth in seen] == [
        ("n1", "Bearer tok-1"), ("n1", "Bearer tok-1"), ("n1", "Bearer tok-2")]
    assert seen[0][1]["metadata"]["annotations"]["nodeagent.io/api-url"] == "http://127.0.0.1:10250"
    assert seen[0][1]["status"]["allocatable"]["cpu"] == "1"


async def test_loop_idles_without_scheduler_url_and_picks_up_a_reload(fake_scheduler: Any) -> None:
    server, seen, _ = fake_scheduler
    configs = [config(), config(), config(schedulerURL=str(server.make_url("")))]
    rounds = iter(configs)
    current = {"cfg": next(rounds)}
    calls = 0

    async def fake_sleep(seconds: float) -> None:
        nonlocal calls
        calls += 1
        try:
            current["cfg"] = next(rounds)
        except StopIteration:
            raise asyncio.CancelledError from None

    with pytest.raises(asyncio.CancelledError):
        await registration_loop(lambda: current["cfg"], lambda: node_report("n1"), lambda: 1, sleep=fake_sleep)
    assert calls == 3 and len(seen) == 1


async def test_failures_are_logged_once_per_streak(fake_scheduler: Any) -> None:
    server, seen, state = fake_scheduler
    cfg = config(schedulerURL=str(server.make_url("")))
    reg = Registration(timeout=2)
    state["status"] = 401
    with capture_logs() as logs:
        assert not await reg.report(cfg, node_report("n1"), "http://a:1")
        assert not await reg.report(cfg, node_report("n1"), "http://a:1")
        state["status"] = 200
        assert await reg.report(cfg, node_report("n1"), "http://a:1")
    await reg.close()
    events = [e["event"] for e in logs]
    assert events == ["scheduler_report_failed", "scheduler_registered"]
    assert "HTTP 401" in logs[0]["error"]
    unreachable = config(schedulerURL="http://127.0.0.1:9")
    assert not await Registration(timeout=2).report(unreachable, node_report("n1"), "http://a:1")


async def test_registers_with_the_real_scheduler_api(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k")
    token.chmod(0o600)
    fake = FakeAgents()
    fake.add_node("n1")
    svc = make_service(fake, nodes=[], authentication={"tokenFile": str(token)})
    await svc.start(serve=False)
    server = TestServer(create_app(svc))
    await server.start_server()
    try:
        cfg = config(schedulerURL=str(server.make_url("")), schedulerTokenFile=str(token))
        reg = Registration()
        assert await reg.report(cfg, node_report("n1", cpu="3"), agent_api_url(cfg, 10250))
        await reg.close()
        assert svc.state.nodes["n1"].url == "http://127.0.0.1:10250"
        assert svc.state.table.spec("n1").ready
        assert svc.node_object("n1")["status"]["allocatable"]["cpu"] == "3"
    finally:
        await server.close()
        await svc.stop()
