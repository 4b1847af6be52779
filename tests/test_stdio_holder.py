"""The per-run stdio holders (runtime/stdio_holder.py), with real processes: a terminal's holder
copies it into the log and lends its master to a session; a stdinOnce keeper keeps EOF away until it
is released; a record whose PID now names another process is never acted on."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from nodeagent.agent.runtime import stdio_holder
from nodeagent.agent.runtime.attach import StdinWriter, TerminalWriter, fifo_path, recreate_fifo
from nodeagent.agent.runtime.exec_session import set_window_size
from nodeagent.agent.runtime.spawn import LaunchSpec, spawn


async def gone(pid: int, timeout: float = 5.0) -> bool:
    """The process is gone and reaped (no zombie left: the holder's reaper ran)."""
    for _ in range(int(timeout / 0.02)):
        if not os.path.exists(f"/proc/{pid}"):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_terminal_is_held_lent_to_a_session_and_logged(tmp_path: Path) -> None:
    log = str(tmp_path / "0.log")
    holder, slave = stdio_holder.start_tty(str(tmp_path), log)
    spec = LaunchSpec(("/bin/sh", "-c", "[ -t 0 ] && echo tty-yes; read a; echo got-$a $(stty size)"),
                      {"PATH": "/usr/bin:/bin"}, terminal=os.ttyname(slave))
    proc = spawn(spec, str(tmp_path / "unused.log"))
    os.close(slave)
    assert stdio_holder.read_record(str(tmp_path)) == holder
    for _ in range(250):
        if os.path.exists(log) and Path(log).read_bytes():
            break
        await asyncio.sleep(0.02)
    master = stdio_holder.take_fd(str(tmp_path), stdio_holder.TTY)
    try:
        set_window_size(master, 120, 33)
        writer = TerminalWriter(os.dup(master))
        await writer.write(b"blue\r")
        writer.close()
    finally:
        os.close(master)
    assert await asyncio.to_thread(os.waitpid, proc.pid, 0) == (proc.pid, 0)
    assert await gone(holder.pid)  # the terminal's last process is gone: its holder ends (EIO)
    assert Path(log).read_bytes() == b"tty-yes\r\nblue\r\ngot-blue 33 120\r\n"
    assert not (tmp_path / "unused.log").exists()  # the terminal is the process's stdout, not a file
    with pytest.raises(stdio_holder.HolderGone):
        stdio_holder.take_fd(str(tmp_path), stdio_holder.TTY)


async def test_a_stdin_keeper_keeps_eof_away_until_it_is_released(tmp_path: Path) -> None:
    fifo = fifo_path(str(tmp_path))
    recreate_fifo(fifo)
    keeper = stdio_holder.start_stdin_keeper(str(tmp_path), fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # as the container opens it, minus the blocking
    try:
        with pytest.raises(BlockingIOError):
            os.read(reader, 100)  # empty, not ended
        writer = StdinWriter(fifo)
        await writer.write(b"last words\n")
        assert stdio_holder.release(str(tmp_path), stdio_holder.STDIN)
        assert await gone(keeper.pid)
        assert os.read(reader, 100) == b"last words\n"  # what was sent stays with the pipe
        with pytest.raises(BlockingIOError):
            os.read(reader, 100)  # the session's writer is still open: no EOF yet
        writer.close()
        assert os.read(reader, 100) == b""  # EOF
    finally:
        os.close(reader)
    assert stdio_holder.read_record(str(tmp_path)) is None
    assert not stdio_holder.release(str(tmp_path), stdio_holder.STDIN)  # once only


def test_a_record_whose_pid_names_another_process_is_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        stdio_holder.write_record(str(tmp_path), stdio_holder.Holder(stdio_holder.STDIN, other.pid, 1))
        with pytest.raises(stdio_holder.HolderGone):
            stdio_holder.take_fd(str(tmp_path), stdio_holder.STDIN)
        assert not stdio_holder.release(str(tmp_path), stdio_holder.STDIN)
        assert other.poll() is None  # not killed: its start time is not the holder's
        stdio_holder.write_record(str(tmp_path), stdio_holder.Holder(stdio_holder.TTY, other.pid, 1))
        assert not stdio_holder.release(str(tmp_path), stdio_holder.STDIN)  # another kind
    finally:
        other.kill()
        other.wait()
