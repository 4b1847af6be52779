"""NodeReporter: the Node object this agent reports, from fixed facts plus the pods cgroup's usage
and the images on the node (`status.images`, given as a callable: node/ sits below images/).

Capacity, node info and the node's name are read once by the daemon's factory and given here;
`start()` reads the node's addresses (in a child process, see addresses.py); `node()` adds the
current usage of kubepods and the pressure conditions each time it is asked. A reload reaches it
through `reconfigure` (allocatable moves with the reservations).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import structlog

from nodeagent.agent.cgroups import layout
from nodeagent.agent.cgroups.driver import CgroupDriver
from nodeagent.agent.config.settings import Config
from nodeagent.agent.node.addresses import node_addresses_async, to_node_addresses
from nodeagent.agent.node.allocatable import NodeAllocatable
from nodeagent.agent.node.capacity import Capacity
from nodeagent.agent.node.status import ConditionTracker, NodeStatusInput, build_node
from nodeagent.core.clock import Clock
from nodeagent.core.quantity import Quantity
from nodeagent.core.wellknown import NODE_DISK_PRESSURE, NODE_MEMORY_PRESSURE, NODE_PID_PRESSURE

log = structlog.get_logger(__name__)


class NodeReporter:
    def __init__(self, *, name: str, capacity: Capacity, allocatable: NodeAllocatable, driver: CgroupDriver,
                 clock: Clock, node_info: dict[str, str], pressure: Callable[[], tuple[str, ...]],
                 images: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        """`images`: status.images as the kubelet reports them (ImageManager.node_images, in memory)."""
        self.name = name
        self.capacity = capacity
        self.allocatable = allocatable
        self.driver = driver
        self.node_info = node_info
        self.pressure = pressure  # the node conditions that hold now (the eviction manager's)
        self.images = images
        self.addresses: list[dict[str, str]] = []
        self.tracker = ConditionTracker(clock)

    async def start(self) -> None:
        """Read the node's addresses; without them the node still comes up, reachable as loopback."""
        try:
            self.addresses = await node_addresses_async()
        except (OSError, ValueError, TimeoutError) as e:
            log.warning("node_addresses_failed", error=str(e))
            self.addresses = to_node_addresses([], socket.gethostname())

    def reconfigure(self, config: Config, allocatable: NodeAllocatable) -> None:
        self.allocatable = allocatable

    def usage(self) -> dict[str, Quantity]:
        try:
            stats = self.driver.stats(layout.KUBEPODS)
        except OSError:
            return {}
        return {
            "memory": Quantity.from_value(stats.working_set, "BinarySI"),
            "cpuUsageSeconds": Quantity.from_milli(stats.cpu_usage_usec // 1000, "DecimalSI"),
            "pods": Quantity.from_value(stats.pids_current, "DecimalSI"),
        }

    def node(self) -> dict[str, Any]:
        conditions = self.pressure()
        inp = NodeStatusInput(
            name=self.name,
            capacity=self.capacity.as_quantities(),
            allocatable=self.allocatable.allocatable,
            usage={k: v for k, v in self.usage().items() if k != "pods"},
            addresses=self.addresses,
            node_info=self.node_info,
            memory_pressure=NODE_MEMORY_PRESSURE in conditions,
            disk_pressure=NODE_DISK_PRESSURE in conditions,
            pid_pressure=NODE_PID_PRESSURE in conditions,
        )
        node = build_node(inp, self.tracker)
        images = self.images() if self.images is not None else []
        if images:  # the kubelet's `images,omitempty`: a node without images has no key
            node["status"]["images"] = images
        return node
