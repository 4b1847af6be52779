"""`kubectl exec`'s two ends below the HTTP layer: the protocol's pure parts (core/remotecommand.py)
and the agent's ExecSession (runtime/exec_session.py) with real processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
from multidict import MultiDict

from nodeagent.agent.runtime.exec_session import ExecSession
from nodeagent.agent.runtime.spawn import LaunchSpec
from nodeagent.core import remotecommand as rc


@pytest.mark.parametrize(("query", "expected"), [
    ([("command", "ls"), ("command", "-l"), ("stdout", "true")], rc.ExecOptions(("ls", "-l"), stdout=True)),
    ([("command", "sh"), ("container", "c"), ("stdin", "1"), ("stdout", "true"), ("stderr", "false"), ("tty", "true")],
     rc.ExecOptions(("sh",), "c", stdin=True, stdout=True, tty=True)),
])
def test_exec_options(query: list[tuple[str, str]], expected: rc.ExecOptions) -> None:
    opts = rc.exec_options(MultiDict(query))
    assert opts == expected
    assert rc.exec_options(MultiDict(rc.query_of(opts))) == opts  # the hop to the agent says the same


@pytest.mark.parametrize(("query", "message"), [
    ([("stdout", "true")], "you must specify at least 1 command"),
    ([("command", "ls")], "you must specify at least 1 of stdin, stdout, stderr"),
    ([("command", "ls"), ("stdout", "false"), ("stderr", "0")], "you must specify at least 1 of stdin, stdout, stderr"),
])
def test_exec_options_errors(query: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rc.exec_options(MultiDict(query))


def test_exit_status_is_the_kubelets() -> None:
    assert json.loads(rc.exit_status(0, ("true",))) == {"metadata": {}, "status": "Success"}
    status = json.loads(rc.exit_status(3, ("sh", "-c", "exit 3")))
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert status["message"] == "command terminated with non-zero exit code: error executing command " \
                                "[sh -c exit 3], exit code 3"


@pytest.mark.parametrize(("data", "size"), [
    (b'{"Width": 80, "Height": 24}', (80, 24)),
    (b'{"Width": 80}', None), (b"not json", None), (b'{"Width": -1, "Height": 2}', None), (b"[]", None),
])
def test_parse_resize(data: bytes, size: tuple[int, int] | None) -> None:
    assert rc.parse_resize(data) == size


async def collect(session: ExecSession) -> dict[int, bytes]:
    out: dict[int, bytes] = {1: b"", 2: b""}
    while (item := await asyncio.wait_for(session.read(), 10)) is not None:
        out[item[0]] += item[1]
    return out


def spec(script: str, **kw: object) -> LaunchSpec:
    return LaunchSpec(("/bin/sh", "-c", script), {"PATH": "/usr/bin:/bin", "WHO": "container"}, **kw)  # type: ignore[arg-type]


async def test_pipes_env_cwd_stdin_and_the_exit_code(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    session = ExecSession.start(spec('echo "$WHO@$(pwd) $$"; tr a-z A-Z; echo err >&2; exit 5', working_dir=str(tmp_path)),
                                [str(procs)], None, stdin=True, stdout=True, stderr=True, tty=False)
    try:
        await session.write_stdin(b"abc\n" * 20000)  # more than a pipe holds: written as it is read
        session.close_stdin()
        out = await collect(session)
        assert await session.exit_code == 5
    finally:
        session.close()
    first, rest = out[1].split(b"\n", 1)
    assert first == f"container@{tmp_path} {session.pid}".encode()
    assert rest == b"ABC\n" * 20000 and out[2] == b"err\n"
    assert procs.read_text().strip() == str(session.pid)  # it joined the (given) cgroup before it ran


async def test_a_terminal_is_the_controlling_one_and_takes_the_size() -> None:
    session = ExecSession.start(spec("[ -t 0 ] && echo tty; read size; stty size; exit 0"), [], None,
                                stdin=True, stdout=True, stderr=True, tty=True)
    try:
        session.resize(100, 30)
        await session.write_stdin(b"go\n")
        out = await collect(session)
        assert await session.exit_code == 0
    finally:
        session.close()
    assert out[2] == b"" and b"tty" in out[1] and b"30 100" in out[1], out


async def test_a_background_child_holding_the_pipe_does_not_hold_the_end() -> None:
    session = ExecSession.start(spec("sleep 30 & echo started"), [], None, stdin=False, stdout=True, stderr=False,
                                tty=False, drain_s=0.2)
    try:
        out = await collect(session)  # ends drain_s after the exit although `sleep` keeps stdout open
        assert out[1] == b"started\n" and await session.exit_code == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signal.SIGKILL)  # the sleep left in the command's group
        session.close()


async def test_kill_ends_the_process_group() -> None:
    session = ExecSession.start(spec("sleep 30"), [], None, stdin=True, stdout=True, stderr=False, tty=False)
    try:
        session.kill()
        assert await asyncio.wait_for(session.exit_code, 5) == 137
    finally:
        session.close()
    with pytest.raises(ProcessLookupError):
        os.kill(session.pid, 0)


async def test_kill_waits_for_the_runtime_to_name_what_it_started(tmp_path: Path) -> None:
    """Through a runtime, killing the runtime before it has named the exec'd process (its pid file)
    would leave that process running in the container: kill() asks again until it is named."""
    named = tmp_path / "named"
    asked: list[bool] = []

    def on_kill() -> bool:
        asked.append(named.exists())
        return named.exists()

    session = ExecSession.start(spec("sleep 30"), [], None, stdin=True, stdout=True, stderr=False, tty=False)
    try:
        session.on_kill = on_kill
        session.kill()
        await asyncio.sleep(0.3)
        assert not session.exit_code.done(), "the runtime was killed before it named the command"
        assert len(asked) >= 3 and not any(asked)
        named.touch()
        assert await asyncio.wait_for(session.exit_code, 5) == 137
        assert asked[-1] is True
    finally:
        session.close()
