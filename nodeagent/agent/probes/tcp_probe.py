"""tcpSocket probes: a TCP connect within timeoutSeconds, closed at once (pkg/probe/tcp).

A plain non-blocking socket, no stream objects: the cheapest probe there is. On loopback the
kernel completes the handshake (or refuses it) inside connect(2), which still says EINPROGRESS:
the socket's error and its peer are read at once, so most probes never wait; one whose handshake
is really in flight is looked at again on the probes' grid (poller.py), with no registration on
the loop. Failures read as Go's dialer words them (`dial tcp 127.0.0.1:81: connect: connection
refused`, `... i/o timeout`, `dial tcp: lookup <host>: ...`).

`connect` is the one dial of every probe: the HTTP client (plain, and under TLS) and the gRPC
client call it too.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import socket
from typing import Any

from nodeagent.agent.probes.poller import until
from nodeagent.agent.probes.results import SUCCESS, ProbeOutcome, failure
from nodeagent.agent.probes.target import join_host_port


async def connect(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to host:port: an IP literal needs no resolver, a name
    is resolved off the loop (getaddrinfo in the default executor; its errors are
    socket.gaierror) and its first address dialled. The caller bounds the time and closes it."""
    try:
        sock, done = dial_literal(host, port)
    except ValueError:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            done = dial(sock, address)
        except BaseException:
            sock.close()
            raise
    return sock if done else await finish(sock)


def dial_literal(host: str, port: int) -> tuple[socket.socket, bool]:
    """A new socket dialling an IP literal (ValueError for a name): (socket, connected already);
    OSError, the socket closed, when the connect failed at once."""
    family, address = ip_address_of(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        return sock, dial(sock, address)
    except BaseException:
        sock.close()
        raise


async def finish(sock: socket.socket) -> socket.socket:
    """Wait (on the probes' grid) for a connect in flight; the socket is closed if it fails."""
    try:
        await until(lambda: connected(sock))
    except BaseException:
        sock.close()
        raise
    return sock


def dial(sock: socket.socket, address: tuple[Any, ...]) -> bool:
    """Start the connect: True when it completed at once (loopback), False while in flight;
    OSError (ConnectionRefusedError...) when it failed."""
    err = sock.connect_ex(address)
    if err in (errno.EINPROGRESS, errno.EAGAIN, errno.EINTR):
        return connected(sock)
    if err:
        raise OSError(err, os.strerror(err))
    return True


def connected(sock: socket.socket) -> bool:
    """A connect in flight: True once done, False while the handshake goes on; its error raised."""
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))
    try:
        sock.getpeername()
    except OSError as e:
        if e.errno == errno.ENOTCONN:
            return False
        raise
    return True


async def tcp_probe(host: str, port: int, timeout_seconds: float) -> ProbeOutcome:
    where = join_host_port(host, port)
    try:
        try:
            sock, done = dial_literal(host, port)  # loopback: answered inside connect(2), no timer
        except ValueError:
            done = False
            async with asyncio.timeout(timeout_seconds):
                sock = await connect(host, port)
        else:
            if not done:
                async with asyncio.timeout(timeout_seconds):
                    await finish(sock)
    except TimeoutError:
        return failure(f"dial tcp {where}: i/o timeout")
    except socket.gaierror as e:
        return failure(f"dial tcp: lookup {host}: {e.strerror or e}")
    except ConnectionRefusedError:
        return failure(f"dial tcp {where}: connect: connection refused")
    except OSError as e:
        return failure(f"dial tcp {where}: connect: {(os.strerror(e.errno) if e.errno else str(e)).lower()}")
    sock.close()
    return SUCCESS


@functools.lru_cache(maxsize=256)
def ip_address_of(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """(family, sockaddr) of an IP literal without a resolver round trip; ValueError for a name."""
    ip = ipaddress.ip_address(host)
    if ip.version == 6:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)
