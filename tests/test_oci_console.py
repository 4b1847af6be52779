"""oci/console.py: a tty container's console taken from the runtime (`--console-socket`, as crun
sends it) and given to a `cat` holder that copies it into the run's log; with a real pty and a
real holder, the runtime played by a client that sends the master as crun does."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from nodeagent.agent.runtime import stdio_holder
from nodeagent.agent.runtime.oci import console
from nodeagent.agent.runtime.oci.runtime import OciRuntime, monitor_launch
from nodeagent.agent.runtime.spawn import LaunchSpec


async def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def runtime_sends(bundle: Path, master: int) -> None:
    """What crun does: connect by the relative name from the bundle directory, send the master."""
    cwd = os.getcwd()
    os.chdir(bundle)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(console.SOCKET_NAME)
            socket.send_fds(s, [b"console"], [master])
    finally:
        os.chdir(cwd)


async def test_the_console_goes_to_a_holder_that_logs_it(tmp_path: Path) -> None:
    bundle = tmp_path / ("b" * 120)  # a bundle path longer than sun_path allows
    bundle.mkdir()
    container_dir = tmp_path / "c"
    container_dir.mkdir()
    log_path = container_dir / "0.log"
    sock = console.listen(str(bundle))
    console.hand_over(sock, str(bundle), str(container_dir), str(log_path))
    master, slave = os.openpty()
    try:
        await asyncio.to_thread(runtime_sends, bundle, master)
    finally:
        os.close(master)  # the runtime's copy goes: the holder's is the only one
    await wait_for(lambda: stdio_holder.alive(str(container_dir), stdio_holder.TTY))
    assert not (bundle / console.SOCKET_NAME).exists()
    os.write(slave, b"last words\n")
    taken = stdio_holder.take_fd(str(container_dir), stdio_holder.TTY)  # what an attach session does
    os.close(taken)
    os.close(slave)  # the container ends: the holder reads EIO after copying everything
    await wait_for(lambda: not stdio_holder.alive(str(container_dir), stdio_holder.TTY))
    assert log_path.read_bytes() == b"last words\r\n"  # the console's line discipline, untouched


async def test_a_runtime_that_sends_nothing_leaves_no_holder(tmp_path: Path) -> None:
    sock = console.listen(str(tmp_path))
    console.hand_over(sock, str(tmp_path), str(tmp_path), str(tmp_path / "0.log"))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(console.SOCKET_NAME)
    finally:
        os.chdir(cwd)
    await wait_for(lambda: not (tmp_path / console.SOCKET_NAME).exists())
    assert stdio_holder.read_record(str(tmp_path)) is None


@pytest.mark.parametrize(("name", "hands_over"), [("crun", True), ("runc", False)])
def test_which_runtime_hands_over_the_console(name: str, hands_over: bool) -> None:
    rt = OciRuntime(name, f"/usr/bin/{name}", "/run/r")
    assert rt.hands_over_console is hands_over
    argv = rt.run_argv("/b", "cid", console_socket=rt.hands_over_console)
    assert (argv[argv.index("run") + 1:argv.index("--bundle")][-2:] == ["--console-socket", console.SOCKET_NAME]) \
        is hands_over


def test_a_monitor_that_hands_over_the_console_has_no_stdin() -> None:
    """No terminal of the run's (the supervisor left it to the runtime): the FIFO is not the
    monitor's stdin (the container reads its console), and it runs in the bundle directory."""
    launch = monitor_launch(["crun", "run"], LaunchSpec(("sh",), stdin="/x/stdin", stdin_once=True, tty=True),
                            bundle_dir="/b")
    assert (launch.stdin, launch.stdin_once, launch.terminal, launch.working_dir) == (None, False, None, "/b")
    plain = monitor_launch(["runc", "run"], LaunchSpec(("sh",), stdin="/x/stdin"), bundle_dir="/b")
    assert (plain.stdin, plain.terminal) == ("/x/stdin", None)
