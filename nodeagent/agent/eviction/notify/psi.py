"""PSI triggers: the kernel wakes us when memory stall time within a window passes a threshold.

Kernel rules (Documentation/accounting/psi.rst, kernel/sched/psi.c), some learnt the hard way:
- the trigger is written as "some|full <stall us> <window us>" to /proc/pressure/memory or a
  cgroup2 memory.pressure opened O_RDWR; the kernel overwrites the LAST byte written with NUL, so
  the line needs a terminator (we send "\\0"), or its last digit is silently dropped;
- window 500 ms .. 10 s (older kernels; newer ones accept smaller windows from privileged users);
- since Linux 6.5 ("sched/psi: Allow unprivileged polling of N*2s period"), a writer without
  CAP_SYS_RESOURCE in its effective set (checked at open) may only use windows that are multiples
  of 2 s, and its trigger is evaluated by the 2 s averaging worker, not the rt poller: it fires up
  to ~2 s late. We ask for the requested window first and fall back to the nearest 2 s multiple
  (same stall ratio) on EINVAL; `rtpoll` says whether the trigger is known to be rt-polled. Root
  in a container or VM whose bounding set lacks CAP_SYS_RESOURCE (as on our dev/CI machines) is
  "unprivileged" here.
- readiness is POLLPRI, which asyncio's reader (EPOLLIN) never sees: the fd is registered for
  EPOLLPRI in an epoll of our own, and the loop watches that epoll fd. The loop's own check of the
  inner epoll already consumes the trigger's one-shot event (psi_trigger_poll clears it), so the
  inner epoll's readability IS the event; EPOLLERR (cgroup removed) stays visible and disarms.
- a trigger fires at most once per window.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import select

import structlog

from nodeagent.agent.eviction.notify.base import NotifierUnavailable, WakeFn
from nodeagent.agent.node.procfs import has_cap_sys_resource

log = structlog.get_logger(__name__)

PSI_SYSTEM_MEMORY = "/proc/pressure/memory"
WINDOW_MIN_US = 500_000
WINDOW_MAX_US = 10_000_000
UNPRIVILEGED_STEP_US = 2_000_000
KINDS = ("some", "full")


def validate_trigger(kind: str, stall_us: int, window_us: int) -> None:
    """Reject what every kernel refuses, naming the field."""
    if kind not in KINDS:
        raise ValueError(f"kind: must be one of {KINDS}, got {kind!r}")
    for field, v in (("stall_us", stall_us), ("window_us", window_us)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{field}: expected an integer, got {v!r}")
    if not WINDOW_MIN_US <= window_us <= WINDOW_MAX_US:
        raise ValueError(f"window_us: {window_us} not in [{WINDOW_MIN_US}, {WINDOW_MAX_US}]")
    if not 0 < stall_us <= window_us:
        raise ValueError(f"stall_us: {stall_us} must be in (0, window_us={window_us}]")


def trigger_line(kind: str, stall_us: int, window_us: int) -> bytes:
    """The bytes to write, NUL-terminated (the kernel replaces the last byte with NUL)."""
    validate_trigger(kind, stall_us, window_us)
    return f"{kind} {stall_us} {window_us}".encode() + b"\0"


def unprivileged_trigger(stall_us: int, window_us: int) -> tuple[int, int]:
    """The same stall ratio over the nearest allowed window: a multiple of 2 s, at most 10 s."""
    validate_trigger("some", stall_us, window_us)
    window = min(WINDOW_MAX_US, math.ceil(window_us / UNPRIVILEGED_STEP_US) * UNPRIVILEGED_STEP_US)
    stall = max(1, min(window, math.ceil(stall_us * window / window_us)))
    return stall, window


class PsiNotifier:
    """One PSI trigger on a pressure file (system-wide or a cgroup2 memory.pressure)."""

    def __init__(
        self,
        wake: WakeFn,
        path: str = PSI_SYSTEM_MEMORY,
        *,
        kind: str = "some",
        stall_us: int = 100_000,
        window_us: int = 1_000_000,
        name: str | None = None,
    ) -> None:
        validate_trigger(kind, stall_us, window_us)
        self.wake = wake
        self.path = path
        self.kind, self.stall_us, self.window_us = kind, stall_us, window_us
        self.name = name or f"psi:{path}"
        self.armed: tuple[str, int, int] | None = None  # the trigger the kernel accepted
        self.rtpoll = False  # known rt-polled (fires within ~window/10); else maybe 2 s averaging
        self.fired = 0
        self.gone = False  # the pressure file went away (cgroup removed): disarmed
        self._fd: int | None = None
        self._ep: select.epoll | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NotifierUnavailable(f"no {self.path}: kernel without PSI (CONFIG_PSI, psi=1)") from None
        except PermissionError as e:
            raise NotifierUnavailable(f"cannot open {self.path} read-write: {e.strerror}") from None
        try:
            self._arm(fd)
            ep = select.epoll()
            try:
                ep.register(fd, select.EPOLLPRI)
                loop = asyncio.get_running_loop()
                loop.add_reader(ep.fileno(), self._ready)
            except BaseException:
                ep.close()
                raise
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ep, self._loop = fd, ep, loop
        kind, stall, window = self.armed or (self.kind, 0, 0)
        log.info("psi_trigger_armed", path=self.path, kind=kind, stall_us=stall, window_us=window, rtpoll=self.rtpoll)

    def _arm(self, fd: int) -> None:
        try:
            os.write(fd, trigger_line(self.kind, self.stall_us, self.window_us))
            self.armed = (self.kind, self.stall_us, self.window_us)
            # a window the unprivileged rule forbids was taken: privileged or an older kernel
            self.rtpoll = has_cap_sys_resource() or self.window_us % UNPRIVILEGED_STEP_US != 0
            return
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise NotifierUnavailable(f"{self.path}: PSI disabled (psi=0 or cgroup PSI off)") from None
            if e.errno != errno.EINVAL or self.window_us % UNPRIVILEGED_STEP_US == 0:
                raise
        stall, window = unprivileged_trigger(self.stall_us, self.window_us)
        log.info("psi_trigger_unprivileged", path=self.path, requested_window_us=self.window_us,
                 window_us=window, stall_us=stall, why="no CAP_SYS_RESOURCE: 2 s windows, averaging worker")
        os.write(fd, trigger_line(self.kind, stall, window))
        self.armed, self.rtpoll = (self.kind, stall, window), False

    def _ready(self) -> None:
        assert self._ep is not None
        events = self._ep.poll(0)
        if any(ev & (select.EPOLLERR | select.EPOLLHUP) for _, ev in events):
            log.warning("psi_trigger_gone", path=self.path)
            self.gone = True
            self.close()
        else:
            self.fired += 1
        self.wake(self.name)

    def close(self) -> None:
        if self._ep is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._ep.fileno())
            self._ep.close()
            self._ep = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
