"""SIGUSR1 dumps where a daemon is: every thread's stack, and every asyncio task's.

A daemon that stops answering (a start that never reaches ready, a wedged loop) is diagnosed
with `kill -USR1 PID`: faulthandler writes the threads' stacks to stderr from its C handler, so
it works even while the event loop is blocked; once the loop runs, each task's stack is logged
too (`asyncio_task_stack`). The kubelet offers the same through pprof. stderr is the journal
under systemd.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal

import structlog

log = structlog.get_logger(__name__)

SIGNAL = signal.SIGUSR1


def install_thread_dump() -> None:
    """Before the event loop exists (start-up I/O): threads' stacks only."""
    faulthandler.register(SIGNAL, all_threads=True)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """On the running loop: the threads' stacks at once (C handler), then the tasks' stacks."""
    faulthandler.unregister(SIGNAL)  # restores the default, which the loop's handler replaces
    loop.add_signal_handler(SIGNAL, dump_tasks)
    faulthandler.register(SIGNAL, all_threads=True, chain=True)  # chains to the loop's handler


def dump_tasks() -> None:
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(limit=20, file=out)
        log.warning("asyncio_task_stack", task=task.get_name(), stack=out.getvalue())
