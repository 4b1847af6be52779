"""sd_notify over a real AF_UNIX datagram socket: messages, env handling, watchdog cadence."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.daemonkit.sdnotify import Notifier, socket_address, watchdog_loop, watchdog_usec_from_env


class Receiver:
    """A datagram socket read by a thread, so it keeps receiving while the event loop is blocked."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(socket_address(address))
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def wait_for(self, count: int, timeout: float = 2.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return [m for _, m in self.messages]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, Receiver]]:
    path = str(tmp_path / "notify.sock")
    r = Receiver(path)
    yield path, r
    r.close()


def test_ready_status_stopping_arrive(receiver: tuple[str, Receiver]) -> None:
    path, r = receiver
    n = Notifier(path)
    assert n.ready(status="ready: 3 pods") and n.status("line\nbreak") and n.stopping()
    assert r.wait_for(3) == ["READY=1\nSTATUS=ready: 3 pods", "STATUS=line break", "STOPPING=1"]
    n.close()


def test_reloading_carries_monotonic_usec(receiver: tuple[str, Receiver]) -> None:
    path, r = receiver
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    Notifier(path).reloading()
    (msg,) = r.wait_for(1)
    lines = dict(line.split("=", 1) for line in msg.split("\n"))
    assert lines["RELOADING"] == "1"
    assert before <= int(lines["MONOTONIC_USEC"]) <= before + 5_000_000


def test_abstract_namespace_address() -> None:
    name = f"@nodeagent-test-{uuid.uuid4().hex}"
    r = Receiver(name)
    try:
        assert Notifier(name).ready()
        assert r.wait_for(1) == ["READY=1"]
    finally:
        r.close()


def test_from_env_reads_and_unsets(receiver: tuple[str, Receiver]) -> None:
    path, r = receiver
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid()), "OTHER": "x"}
    n = Notifier.from_env(env)
    assert env == {"OTHER": "x"}  # children must not inherit the socket
    assert n.enabled and n.watchdog_interval == 1.5
    n.watchdog()
    assert r.wait_for(1) == ["WATCHDOG=1"]


def test_without_notify_socket_everything_is_a_noop() -> None:
    n = Notifier.from_env({})
    assert not n.enabled and n.watchdog_interval is None
    assert n.ready() is False and n.watchdog() is False


def test_invalid_notify_socket_disables_instead_of_failing() -> None:
    assert not Notifier.from_env({"NOTIFY_SOCKET": "relative/path"}).enabled
    with pytest.raises(ValueError, match="NOTIFY_SOCKET"):
        socket_address("relative")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 30_000_000),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 30_000_000),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "abc"}, None),
        ({}, None),
    ],
)
def test_watchdog_usec_from_env(env: dict[str, str], expected: int | None) -> None:
    assert watchdog_usec_from_env(env, pid=4242) == expected


def test_send_failure_is_reported_not_raised(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "nobody-listens"))
    assert n.ready() is False


async def test_watchdog_pings_at_cadence_and_stop_while_loop_blocked(receiver: tuple[str, Receiver]) -> None:
    path, r = receiver
    interval, block = 0.1, 0.5  # the loop is blocked for 5 intervals
    n = Notifier(path, watchdog_usec=int(interval * 2e6))
    assert n.watchdog_interval == pytest.approx(interval)
    task = asyncio.create_task(watchdog_loop(n))
    await asyncio.sleep(0.55)
    blocked_at = time.monotonic()
    asyncio.get_running_loop().call_soon(time.sleep, block)
    await asyncio.sleep(0)  # the callback runs and holds the loop
    await asyncio.sleep(0.55)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stamps = [t for t, m in r.messages if m == "WATCHDOG=1"]
    assert len(stamps) >= 8
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]  # noqa: RUF007
    before = [g for a, g in zip(stamps, gaps, strict=False) if a + g < blocked_at]
    # before the block: about one ping per interval (loose bounds for a busy machine)
    assert 4 <= len(before) <= 7
    assert max(before) < 3 * interval
    # while blocked: no ping for the whole block, i.e. more than two intervals of silence
    longest = max(gaps)
    assert longest >= block - 0.05 and longest > 2 * interval
    # after the block the pings resume
    assert stamps[-1] > blocked_at + block


async def test_watchdog_loop_skips_pings_when_unhealthy(receiver: tuple[str, Receiver]) -> None:
    path, r = receiver
    n = Notifier(path, watchdog_usec=100_000)
    healthy = [True]
    task = asyncio.create_task(watchdog_loop(n, healthy=lambda: healthy[0]))
    await asyncio.sleep(0.2)
    healthy[0] = False
    count = len(r.wait_for(1))
    await asyncio.sleep(0.3)
    assert len(r.messages) <= count + 1  # at most one ping was already in flight
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert count >= 2


async def test_watchdog_loop_returns_when_not_enabled() -> None:
    await asyncio.wait_for(watchdog_loop(Notifier(None)), 1)
    await asyncio.wait_for(watchdog_loop(Notifier("/run/x.sock", None)), 1)
