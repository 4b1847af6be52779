"""tcpSocket probes: a TCP connect within timeoutSeconds, closed at once (pkg/probe/tcp).

A plain non-blocking socket on the loop (loop.sock_connect), no stream objects: the cheapest
probe there is. Failures read as Go's dialer words them (`dial tcp 127.0.0.1:81: connect:
connection refused`, `... i/o timeout`, `dial tcp: lookup <host>: ...`).

`connect` is the one dial of every probe: the HTTP client (plain, and under TLS) and the gRPC
client call it too.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import socket
from typing import Any

from nodeagent.agent.probes.results import ProbeOutcome, failure, success
from nodeagent.agent.probes.target import join_host_port


async def connect(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to host:port: an IP literal needs no resolver, a name
    is resolved off the loop (getaddrinfo in the default executor; its errors are
    socket.gaierror) and its first address dialled. The caller bounds the time and closes it."""
    loop = asyncio.get_running_loop()
    try:
        family, address = ip_address_of(host, port)
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


async def tcp_probe(host: str, port: int, timeout_seconds: float) -> ProbeOutcome:
    where = join_host_port(host, port)
    try:
        async with asyncio.timeout(timeout_seconds):
            sock = await connect(host, port)
    except TimeoutError:
        return failure(f"dial tcp {where}: i/o timeout")
    except socket.gaierror as e:
        return failure(f"dial tcp: lookup {host}: {e.strerror or e}")
    except ConnectionRefusedError:
        return failure(f"dial tcp {where}: connect: connection refused")
    except OSError as e:
        return failure(f"dial tcp {where}: connect: {(os.strerror(e.errno) if e.errno else str(e)).lower()}")
    sock.close()
    return success()


@functools.lru_cache(maxsize=256)
def ip_address_of(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """(family, sockaddr) of an IP literal without a resolver round trip; ValueError for a name."""
    ip = ipaddress.ip_address(host)
    if ip.version == 6:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)
