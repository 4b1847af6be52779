"""daemonkit/subprocs.py: a killed child is waited for, but never without a bound."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from nodeagent.daemonkit.subprocs import kill_and_reap


class Unkillable:
    """A child that does not go after SIGKILL (what one in uninterruptible sleep does)."""

    returncode = None
    pid = 4242

    def __init__(self) -> None:
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1

    async def wait(self) -> int:
        await asyncio.Event().wait()
        return -9


async def test_a_child_that_does_not_go_is_waited_for_only_so_long() -> None:
    proc = Unkillable()
    began = time.monotonic()
    await kill_and_reap(cast(Any, proc), 0.2)
    assert proc.killed == 1 and 0.15 < time.monotonic() - began < 2


async def test_a_real_child_is_killed_and_reaped() -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    await kill_and_reap(proc)
    assert proc.returncode == -9
    await kill_and_reap(proc)  # already gone: nothing to do
