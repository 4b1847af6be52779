"""Where a probe or an httpGet hook goes: host and port (pure).

Host: the action's `host` if set, else the pod's IP. Pods here are host processes (no network
namespace), so their IP is the node's and a probe without a host goes to 127.0.0.1, the
loopback of the node they share (the kubelet does the same for hostNetwork pods, with the
node's IP: loopback reaches every listener that address would, and more, and does not depend on
which interface holds the node IP).
Port: a number as given; a name is the containerPort of the container's port of that name, or
an all-digit name read as a number (the kubelet's "last ditch effort"); anything else is an
error the prober reports without counting it.
"""

from __future__ import annotations

import ipaddress

from nodeagent.core.model.pod import Container

HOST_PROCESS_POD_IP = "127.0.0.1"


class PortNotFound(ValueError):
    pass


def probe_host(host: str | None, pod_ip: str = HOST_PROCESS_POD_IP) -> str:
    return host or pod_ip


def resolve_port(port: int | str, container: Container) -> int:
    """ResolveContainerPort: the port number; PortNotFound naming the port otherwise."""
    if isinstance(port, int):
        number = port
    else:
        found = container.named_port(port)
        if found is None:
            if not port.isdigit():
                raise PortNotFound(f"port {port} not found")
            found = int(port)
        number = found
    if not 0 < number < 65536:
        raise PortNotFound(f"invalid port number: {number}")
    return number


def join_host_port(host: str, port: int) -> str:
    """net.JoinHostPort: IPv6 literals in brackets."""
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"
