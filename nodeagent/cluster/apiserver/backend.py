"""What the cluster API needs from the control plane process (cluster/server.py implements it).

The API layer depends on this protocol, not on the server module, so the server can import the API
to serve it without an import cycle.
"""

from __future__ import annotations

from typing import Any, Protocol

from nodeagent.cluster.binder import Binder
from nodeagent.cluster.config import SchedulerConfig
from nodeagent.cluster.scheduler.nodes import NodeState
from nodeagent.cluster.state import ClusterState
from nodeagent.cluster.store.sqlite import AsyncStore
from nodeagent.cluster.store.writer import ProcessStore
from nodeagent.core.clock import Clock
from nodeagent.daemonkit.auth import Authenticator


class ClusterBackend(Protocol):
    config: SchedulerConfig
    clock: Clock
    state: ClusterState
    binder: Binder
    store: AsyncStore | ProcessStore
    auth: Authenticator

    def node_state(self, name: str) -> NodeState | None: ...

    def node_object(self, name: str) -> dict[str, Any]: ...

    async def set_unschedulable(self, name: str, value: bool) -> dict[str, Any]: ...

    async def forget_node(self, name: str) -> None: ...

    async def report_node(self, name: str, body: Any) -> dict[str, Any]: ...
