"""What every kernel notifier shares: the interface, the wake callback, and "not on this kernel".

A notifier arms one kernel mechanism and, from the asyncio loop (loop.add_reader, never a thread,
never a blocking read), calls `wake(name)` when the kernel says memory got tighter. It decides
nothing: the eviction manager re-observes on every wake-up. A wake-up may be spurious (a v1
threshold also fires on the way down, a PSI trigger on unrelated pressure); it is never missed
while the notifier is armed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import structlog

log = structlog.get_logger(__name__)

WakeFn = Callable[[str], None]  # called with the notifier's name, on the loop's thread


class NotifierUnavailable(Exception):
    """This kernel (or this cgroup layout) does not offer the mechanism; the reason says what is missing."""


class KernelNotifier(Protocol):
    name: str

    async def start(self) -> None:
        """Arm on the running loop; raises NotifierUnavailable when the kernel lacks the feature."""
        ...

    def close(self) -> None:
        """Disarm and release every fd; idempotent."""
        ...


def event_waker(event: asyncio.Event, on_reason: WakeFn | None = None) -> WakeFn:
    """A WakeFn that sets `event` (what the manager awaits) and optionally records why."""

    def wake(reason: str) -> None:
        if on_reason is not None:
            on_reason(reason)
        event.set()

    return wake


async def start_all(notifiers: Iterable[KernelNotifier]) -> tuple[list[KernelNotifier], dict[str, str]]:
    """Start each notifier; (armed ones, {name: why unavailable}). Other errors propagate,
    after closing the ones already armed."""
    armed: list[KernelNotifier] = []
    unavailable: dict[str, str] = {}
    try:
        for n in notifiers:
            try:
                await n.start()
            except NotifierUnavailable as e:
                unavailable[n.name] = str(e)
                log.info("notifier_unavailable", notifier=n.name, reason=str(e))
                continue
            armed.append(n)
            log.info("notifier_armed", notifier=n.name)
    except BaseException:
        close_all(armed)
        raise
    return armed, unavailable


def close_all(notifiers: Sequence[KernelNotifier]) -> None:
    for n in notifiers:
        n.close()


