"""The scheduler's composition root only wires: build_scheduler does the I/O, and the watchdog's
health check fails once one of the service's loops has died."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_scheduler_support import FakeAgents, make_service

from nodeagent.cluster.config import parse_scheduler_config
from nodeagent.cluster.server import SchedulerService, build_scheduler
from nodeagent.core.errors import FieldError


def test_the_constructor_does_no_io(tmp_path: Path) -> None:
    config = parse_scheduler_config({"authentication": "none", "stateDir": str(tmp_path)}, "t")
    SchedulerService(config, agents=FakeAgents())
    assert list(tmp_path.iterdir()) == []
    build_scheduler(config, agents=FakeAgents())
    assert (tmp_path / "scheduler.db").exists()


def test_the_token_file_is_read_by_the_factory(tmp_path: Path) -> None:
    token = tmp_path / "token"
    config = parse_scheduler_config({"authentication": {"tokenFile": str(token)}, "stateDir": str(tmp_path)}, "t")
    with pytest.raises(ValueError, match="tokenFile"):
        SchedulerService(config, agents=FakeAgents())
    with pytest.raises(FieldError, match="cannot read"):
        build_scheduler(config, agents=FakeAgents())
    token.write_text("s3cret\n")
    token.chmod(0o600)
    assert build_scheduler(config, agents=FakeAgents()).auth.token == b"s3cret"


async def test_a_dead_loop_stops_the_watchdog_pings() -> None:
    fake = FakeAgents()
    fake.add_node("n0")
    svc = make_service(fake)
    await svc.start(serve=False)
    try:
        assert svc.progress.healthy()
        for task in asyncio.all_tasks():
            if task.get_name() == "node-monitor":
                task.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not svc.progress.healthy()
        assert svc.progress.problems() == {"tasks": ["task node-monitor died: cancelled"]}
    finally:
        await svc.stop()
