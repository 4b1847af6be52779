"""A `process.terminal` container's console taken from the OCI runtime, as containerd's shim takes
it: `crun run --console-socket` sends the console's master over a Unix socket of the agent's,
and a `cat` holds it and copies it into the run's log (stdio_holder.hold_terminal), so the
runtime is not in the terminal's data path at all.

Why not let crun relay its own terminal, as runc does (stdio_holder.py): crun 1.8, run in the
foreground with a terminal, stops relaying when the container exits and writes what the console
still holds through its error logger (libcrun `cleanup_watch` -> `flush_fd_to_err`): a tty
container's last output, when it raced the exit, came into the log and to an attached terminal
as a red, timestamped error line (seen in CI, in the pure-v2 guest). runc drains its console
before it exits.

The socket is bound in the bundle directory through /proc/self/fd (a bundle's absolute path can
pass sun_path's 108 bytes) and named relative to it: the runtime runs with the bundle as its
working directory. The console is received on the loop; the agent's shutdown cancels a receipt
not yet done, and the runtime then fails the start (it cannot send the console), which the next
agent sees as a run that ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import structlog

from nodeagent.agent.runtime import stdio_holder

log = structlog.get_logger(__name__)

SOCKET_NAME = "console.sock"  # in the bundle directory, the runtime's working directory
RECEIVE_TIMEOUT_S = 120.0  # the runtime makes the console before the command runs: seconds in the guest
_pending: set[asyncio.Task[None]] = set()


def listen(bundle_dir: str) -> socket.socket:
    """The socket the runtime will send the console to (blocking, small: before the spawn)."""
    dir_fd = os.open(bundle_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        path = f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(1)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(dir_fd)


def close(sock: socket.socket, bundle_dir: str) -> None:
    sock.close()
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(bundle_dir, SOCKET_NAME))


def hand_over(sock: socket.socket, bundle_dir: str, container_dir: str, log_path: str) -> None:
    """On the loop: take the console the runtime sends to `sock` and give it to a holder
    recorded in `container_dir`, copying into `log_path`."""
    task = asyncio.get_running_loop().create_task(_receive(sock, bundle_dir, container_dir, log_path))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def _receive(sock: socket.socket, bundle_dir: str, container_dir: str, log_path: str) -> None:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RECEIVE_TIMEOUT_S):
            conn, _ = await loop.sock_accept(sock)
            with conn:
                master = await _receive_fd(loop, conn)
        try:
            stdio_holder.hold_terminal(container_dir, log_path, master)
        finally:
            os.close(master)
    except (OSError, TimeoutError, ValueError) as e:
        log.warning("oci_console_not_received", dir=container_dir, error=str(e) or type(e).__name__)
    finally:
        close(sock, bundle_dir)


async def _receive_fd(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> int:
    """The one descriptor of the runtime's message (it sends the console's master with a short
    text); ValueError when the runtime closed without sending one."""
    conn.setblocking(False)
    ready = asyncio.Event()
    loop.add_reader(conn.fileno(), ready.set)
    try:
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            except BlockingIOError:
                ready.clear()
                await ready.wait()
                continue
            if not fds:
                raise ValueError("the runtime sent no console")
            for extra in fds[1:]:
                os.close(extra)
            return fds[0]
    finally:
        loop.remove_reader(conn.fileno())
