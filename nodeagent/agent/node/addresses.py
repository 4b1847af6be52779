"""Node addresses for status.addresses: global interface addresses (netlink) plus the hostname.

The daemon reads them in a one-shot child process (`read_in_child`, `python -m
nodeagent.agent.node.addresses`): pyroute2's modules would stay resident in the agent for its
whole life to make one netlink request at start, while the child costs a fraction of a second of
CPU once (bench/README.md, "Node addresses").
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sys
from collections.abc import Iterable
from typing import NamedTuple

from nodeagent.core.waits import wait_for
from nodeagent.daemonkit.subprocs import kill_and_reap

RT_SCOPE_UNIVERSE = 0
# ifaddr flags of addresses that must not be advertised (linux/if_addr.h)
IFA_F_DADFAILED = 0x08
IFA_F_DEPRECATED = 0x20
IFA_F_TENTATIVE = 0x40
_UNUSABLE = IFA_F_DADFAILED | IFA_F_DEPRECATED | IFA_F_TENTATIVE


class AddrInfo(NamedTuple):
    """One interface address as netlink reports it."""

    address: str
    scope: int = RT_SCOPE_UNIVERSE
    flags: int = 0


def to_node_addresses(addrs: Iterable[AddrInfo], hostname: str) -> list[dict[str, str]]:
    """InternalIP entries (IPv4 first, then IPv6, each once) and the Hostname entry.

    Only usable global unicast addresses count; if there is none, loopback is reported so the
    node is still reachable from itself rather than showing no address at all.
    """
    v4: list[str] = []
    v6: list[str] = []
    for a in addrs:
        try:
            ip = ipaddress.ip_address(a.address)
        except ValueError:
            continue
        if (a.scope != RT_SCOPE_UNIVERSE or a.flags & _UNUSABLE or ip.is_loopback
                or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
            continue
        bucket = v4 if ip.version == 4 else v6
        if str(ip) not in bucket:
            bucket.append(str(ip))
    ips = v4 + v6 or ["127.0.0.1"]
    out = [{"type": "InternalIP", "address": ip} for ip in ips]
    if hostname:
        out.append({"type": "Hostname", "address": hostname})
    return out


def read_interface_addresses() -> list[AddrInfo]:
    """All addresses from netlink (RTM_GETADDR); IFA_LOCAL is the local end on point-to-point."""
    from pyroute2 import IPRoute  # imported late: netlink is only needed on a real node

    out: list[AddrInfo] = []
    with IPRoute() as ipr:
        for msg in ipr.get_addr():
            addr = msg.get("IFA_LOCAL") or msg.get("IFA_ADDRESS")
            flags = msg.get("IFA_FLAGS")
            if addr:
                out.append(AddrInfo(addr, int(msg["scope"]),
                                    int(flags if flags is not None else msg["flags"])))
    return out


async def read_in_child(timeout: float = 30.0) -> list[AddrInfo]:  # noqa: ASYNC109 - bounds the child
    """read_interface_addresses() in a child interpreter (see the module docstring)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodeagent.agent.node.addresses",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await wait_for(proc.communicate(), timeout)
    except BaseException:  # timeout or cancellation: never leave the child behind
        await kill_and_reap(proc)
        raise
    if proc.returncode != 0:
        raise OSError(f"address reader exited {proc.returncode}: {err.decode(errors='replace').strip()[-300:]}")
    return [AddrInfo(str(a), int(scope), int(flags)) for a, scope, flags in json.loads(out)]


async def node_addresses_async(hostname: str | None = None) -> list[dict[str, str]]:
    """The node's addresses as Kubernetes lists them, read from this machine (pyroute2 in a child)."""
    return to_node_addresses(await read_in_child(), hostname or socket.gethostname())


if __name__ == "__main__":
    json.dump([list(a) for a in read_interface_addresses()], sys.stdout)
