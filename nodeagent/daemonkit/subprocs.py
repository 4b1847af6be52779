"""Ending a child process we started, from a path that must not hang (a cancellation, a timeout).

After SIGKILL a process normally goes at once, but one in uninterruptible sleep (a hung FUSE or
NFS mount, a stuck disk) does not go until the kernel lets it: an unbounded `await proc.wait()`
there hangs the cancellation and, with it, the agent's shutdown. So the wait is bounded; a child
left behind is logged (the loop's child watcher still reaps it when it goes).
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

log = structlog.get_logger(__name__)

KILL_WAIT_S = 5.0  # how long a SIGKILLed child is waited for


async def kill_and_reap(proc: asyncio.subprocess.Process, seconds: float = KILL_WAIT_S) -> None:
    """SIGKILL `proc` (if it still runs) and wait for its exit at most `seconds`, even when the
    calling task is being cancelled (the caller re-raises its cancellation after this)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    waiter = asyncio.ensure_future(proc.wait())
    try:
        await asyncio.wait({waiter}, timeout=seconds)
    finally:
        if not waiter.done():
            waiter.cancel()
            log.warning("child_not_reaped", pid=proc.pid, waited_s=seconds)
