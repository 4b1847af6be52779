"""The stdin FIFO of `kubectl attach -i` (runtime/attach.py): a process started on it (spawn.py opens
it read-write) reads what a session writes, a full pipe makes the writer wait instead of failing,
and a FIFO nobody reads is refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from nodeagent.agent.runtime.attach import AttachUnavailable, StdinWriter, fifo_path, recreate_fifo


async def test_a_session_feeds_a_reader_and_waits_while_the_pipe_is_full(tmp_path: Path) -> None:
    path = fifo_path(str(tmp_path))
    recreate_fifo(path)
    with pytest.raises(AttachUnavailable):
        StdinWriter(path)  # nobody reads it yet
    reader = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # as the container's stdin is opened
    try:
        writer = StdinWriter(path)
        big = b"x" * (1 << 20)  # far more than a pipe holds
        task = asyncio.ensure_future(writer.write(big))
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting for the reader, the loop free
        got = bytearray()
        while len(got) < len(big):
            try:
                got += os.read(reader, 1 << 16)
            except BlockingIOError:
                await asyncio.sleep(0.001)
        await asyncio.wait_for(task, 5)
        assert bytes(got) == big
        writer.close()
        writer.close()  # twice is fine
    finally:
        os.close(reader)


async def test_recreate_cuts_off_what_an_earlier_run_left_holding_it(tmp_path: Path) -> None:
    """A background child of the last run may still hold its stdin: the next run's is another pipe."""
    path = fifo_path(str(tmp_path))
    recreate_fifo(path)
    old = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        recreate_fifo(path)
        new = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        try:
            writer = StdinWriter(path)
            await writer.write(b"for the new run\n")
            writer.close()
            assert os.read(new, 100) == b"for the new run\n"
            with pytest.raises(BlockingIOError):
                os.read(old, 100)
        finally:
            os.close(new)
    finally:
        os.close(old)


def test_a_process_started_on_it_reads_it(tmp_path: Path) -> None:
    path = fifo_path(str(tmp_path))
    recreate_fifo(path)
    fd = os.open(path, os.O_RDWR)  # what spawn's POSIX_SPAWN_OPEN does for fd 0
    proc = subprocess.Popen(["/bin/sh", "-c", "read line; echo got-$line"], stdin=fd, stdout=subprocess.PIPE)
    os.close(fd)

    async def feed() -> None:
        writer = StdinWriter(path)
        await writer.write(b"hello\n")
        writer.close()
    asyncio.run(feed())
    out, _ = proc.communicate(timeout=10)
    assert out == b"got-hello\n"
