"""systemd service notifications (sd_notify(3)): READY, STATUS, WATCHDOG, STOPPING, RELOADING.

Written here rather than taken from PyPI: the protocol is one datagram to $NOTIFY_SOCKET (an
abstract-namespace address when it starts with '@'), and none of the packages fits:
- `sdnotify` (2017) and `sd-notify` (2020) are unmaintained, have no watchdog timing, and
  neither checks WATCHDOG_PID nor knows RELOADING/MONOTONIC_USEC (Type=notify-reload);
- `systemd-python` and `cysystemd` wrap libsystemd: a C build (headers and a compiler) or
  platform wheels, for ~40 lines of socket code;
- `systemd-watchdog` and `async-sdnotify` are small but still lack RELOADING/MONOTONIC_USEC,
  and their watchdog timers are not tied to a health check of our own.

The watchdog ping runs *on the event loop* (`watchdog_loop`): if the loop blocks (a stuck
synchronous call, a deadlock in a thread the loop waits on), the pings stop and systemd kills
and restarts the agent after WatchdogSec, while the pods, outside the service cgroup, live on.
A send never raises: losing a notification must not take the agent down.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, MutableMapping

import structlog

log = structlog.get_logger(__name__)

ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(value: str) -> str:
    """$NOTIFY_SOCKET as a socket address: '@name' is the abstract namespace ('\\0name')."""
    if not value or value[0] not in "/@":
        raise ValueError(f"NOTIFY_SOCKET: must be an absolute path or start with '@', got {value!r}")
    return "\0" + value[1:] if value[0] == "@" else value


def watchdog_usec_from_env(environ: MutableMapping[str, str], pid: int | None = None) -> int | None:
    """sd_watchdog_enabled(3): WATCHDOG_USEC if it is set, valid, and meant for this process
    (WATCHDOG_PID unset or equal to our pid); None otherwise."""
    raw = environ.get("WATCHDOG_USEC")
    if not raw or not raw.isdigit() or int(raw) == 0:
        return None
    owner = environ.get("WATCHDOG_PID")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    return int(raw)


class Notifier:
    """Sends sd_notify messages; a no-op when there is no notify socket (not under systemd)."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = socket_address(address) if address else None
        self.watchdog_usec = watchdog_usec if self.address else None
        self._sock: socket.socket | None = None
        self._failures = 0

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] | None = None, *, unset: bool = True) -> Notifier:
        """Read NOTIFY_SOCKET / WATCHDOG_USEC / WATCHDOG_PID; by default remove them from the
        environment (sd_notify's unset_environment) so no child process inherits them and
        pings on the agent's behalf."""
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec = watchdog_usec_from_env(env)
        if unset:
            for key in ENV_KEYS:
                env.pop(key, None)
        try:
            return cls(address, usec)
        except ValueError as e:
            log.warning("sd_notify_disabled", error=str(e))
            return cls(None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half of WatchdogSec, as sd_watchdog_enabled(3) advises."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def notify(self, *assignments: str) -> bool:
        """Send "KEY=value" lines in one datagram; False if it could not be sent."""
        if self.address is None:
            return False
        data = "\n".join(assignments).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)  # never stall the event loop on a full queue
            self._sock.sendto(data, self.address)
        except OSError as e:
            self._failures += 1
            if self._failures <= 3 or self._failures % 100 == 0:
                log.warning("sd_notify_failed", message=assignments[0].split("=", 1)[0], error=str(e),
                            failures=self._failures)
            return False
        self._failures = 0
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.notify("STATUS=" + text.replace("\n", " "))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def reloading(self, status: str | None = None) -> bool:
        """RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload (systemd >= 253) requires;
        send `ready()` once the reload is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def watchdog_loop(notifier: Notifier, interval: float | None = None,
                        healthy: Callable[[], bool] | None = None) -> None:
    """Ping WATCHDOG=1 every `interval` seconds (default: half of WATCHDOG_USEC) from the loop.

    `healthy`, if given, is asked before each ping: returning False (e.g. the eviction loop
    has not completed a pass for too long) skips the ping, so systemd restarts a stuck agent.
    Returns at once when the watchdog is not enabled.
    """
    interval = interval or notifier.watchdog_interval
    if not notifier.enabled or not interval:
        return
    log.info("sd_watchdog_started", interval=interval)
    while True:
        ok = True
        if healthy is not None:
            try:
                ok = bool(healthy())
            except Exception:
                log.exception("sd_watchdog_health_check_failed")
                ok = False
        if ok:
            notifier.watchdog()
        else:
            log.warning("sd_watchdog_ping_skipped", reason="health check failed")
        await asyncio.sleep(interval)


__all__ = ["Notifier", "socket_address", "watchdog_loop", "watchdog_usec_from_env"]
