"""tcpSocket probes: a TCP connect within timeoutSeconds, closed at once (pkg/probe/tcp).

A plain non-blocking socket on the loop (loop.sock_connect), no stream objects: the cheapest
probe there is. Failures read as Go's dialer words them (`dial tcp 127.0.0.1:81: connect:
connection refused`, `... i/o timeout`).
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


async def tcp_probe(host: str, port: int, timeout_seconds: float) -> ProbeOutcome:
    loop = asyncio.get_running_loop()
    where = join_host_port(host, port)
    try:
        family, address = ip_address_of(host, port)
    except ValueError:  # a name: resolved off the loop (getaddrinfo runs in the default executor)
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            return failure(f"dial tcp: lookup {host}: {e.strerror or e}")
        family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout_seconds):
            await loop.sock_connect(sock, address)
    except TimeoutError:
        return failure(f"dial tcp {where}: i/o timeout")
    except ConnectionRefusedError:
        return failure(f"dial tcp {where}: connect: connection refused")
    except OSError as e:
        return failure(f"dial tcp {where}: connect: {(os.strerror(e.errno) if e.errno else str(e)).lower()}")
    finally:
        sock.close()
    return success()


@functools.lru_cache(maxsize=256)
def ip_address_of(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """(family, sockaddr) of an IP literal without a resolver round trip; ValueError for a name."""
    ip = ipaddress.ip_address(host)
    if ip.version == 6:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)
