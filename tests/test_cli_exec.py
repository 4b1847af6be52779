"""`nodeagent exec`: the CLI's hand-made WebSocket client (RFC 6455 frames and handshake) and the
remote command channels, against the agent's real exec handler served over a Unix socket (a
host-process target: the command is a real process)."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nodeagent.agent.api.exec import exec_handler
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.cli.client import Client, ClientError, Target
from nodeagent.cli.exec_command import OP_BINARY, accept_key, client_frame, exit_code_of, read_frame, run_exec


def test_accept_key_is_the_rfcs() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 1.3


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 70000])
def test_frames_round_trip_masked(size: int) -> None:
    payload = os.urandom(size)
    data = client_frame(OP_BINARY, payload, b"\x01\x02\x03\x04")
    assert data[1] & 0x80  # masked, as every client frame
    stream = io.BytesIO(data)
    assert read_frame(stream.read) == (OP_BINARY, payload)
    with pytest.raises(EOFError):
        read_frame(stream.read)


def test_exit_code_of() -> None:
    assert exit_code_of({"status": "Success"}) == 0
    failure = {"status": "Failure", "reason": "NonZeroExitCode",
               "details": {"causes": [{"reason": "ExitCode", "message": "42"}]}}
    assert exit_code_of(failure) == 42
    assert exit_code_of({"status": "Failure", "reason": "InternalError"}) == 1


class Backend:
    def __init__(self, running: bool = True) -> None:
        self.running = running

    def exec_target(self, namespace: str, name: str, container: str | None) -> ExecTarget | None:
        if (namespace, name) != ("default", "web"):
            return None
        return ExecTarget(cgroup=None, env={"PATH": "/usr/bin:/bin", "WHO": container or "main"})


async def serve(tmp_path: Path) -> tuple[web.AppRunner, str]:
    app = web.Application()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await exec_handler(request, Backend())  # type: ignore[arg-type]

    app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}/exec", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    path = str(tmp_path / "agent.sock")
    await web.UnixSite(runner, path).start()
    return runner, path


def call(path: str, name: str, command: list[str], container: str | None = None) -> tuple[int, bytes, bytes]:
    out, err = io.BytesIO(), io.BytesIO()
    code = run_exec(Client(Target(socket_path=path, timeout=10)), "default", name, command, container, out, err)
    return code, out.getvalue(), err.getvalue()


async def test_a_command_runs_with_its_streams_and_exit_code(tmp_path: Path) -> None:
    runner, path = await serve(tmp_path)
    try:
        got: Any = await asyncio.to_thread(call, path, "web", ["sh", "-c", 'echo "out $WHO"; echo err >&2; exit 3'],
                                           "side")
        assert got == (3, b"out side\n", b"err\n")
        assert await asyncio.to_thread(call, path, "web", ["true"]) == (0, b"", b"")
        big = await asyncio.to_thread(call, path, "web", ["head", "-c", "200000", "/dev/zero"])
        assert big[0] == 0 and big[1] == bytes(200000)  # frames of every length class
        with pytest.raises(ClientError, match='pod "nope" not found'):
            await asyncio.to_thread(call, path, "nope", ["true"])
    finally:
        await runner.cleanup()


def test_an_unreachable_agent_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="cannot reach the agent"):
        call(str(tmp_path / "missing.sock"), "web", ["true"])
