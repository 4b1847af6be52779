"""Shared helpers for the scheduler's service and API tests (no tests here): in-memory agents,
node and pod manifests, a service factory."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from nodeagent.cluster.agents.client import AgentConflict, AgentRefused, AgentUnavailable
from nodeagent.cluster.config import parse_scheduler_config
from nodeagent.cluster.server import SchedulerService, build_scheduler
from nodeagent.cluster.store.sqlite import SchedulerMemoryStore, SchedulerStore
from nodeagent.core.clock import Clock


def node_report(name: str, cpu: str = "1", memory: str = "1Gi", pods: str = "110", *,
                memory_pressure: bool = False, ready: bool = True) -> dict[str, Any]:
    def cond(t: str, on: bool) -> dict[str, str]:
        return {"type": t, "status": "True" if on else "False"}

    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods,
                                       "ephemeral-storage": "10Gi"},
                       "conditions": [cond("MemoryPressure", memory_pressure), cond("DiskPressure", False),
                                      cond("PIDPressure", False), cond("Ready", ready)]}}


def pod_manifest(name: str, cpu: str | None = "100m", memory: str | None = "64Mi", *,
                 namespace: str | None = None, priority_class: str | None = None,
                 grace: int | None = None, **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {"name": "c", "command": ["sleep", "inf"]}
    if requests:
        container["resources"] = {"requests": requests}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [container], **spec}}
    if namespace:
        body["metadata"]["namespace"] = namespace
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    if grace is not None:
        body["spec"]["terminationGracePeriodSeconds"] = grace
    return body


class FakeAgents:
    """Agents in memory. A delete marks the pod terminating; it is gone after `linger` more
    reads of it (0: at once). `refuse[node]` makes that node answer 422 with (reason, message)."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, dict[str, Any]]] = {}
        self.down: set[str] = set()
        self.refuse: dict[str, tuple[str, str]] = {}
        self.linger = 0
        self._left: dict[tuple[str, str], int] = {}
        self.calls: list[tuple[str, str, str]] = []  # (verb, node, pod key or "")
        self.on_create: Callable[[str, dict[str, Any]], None] | None = None

    def add_node(self, name: str, **kw: Any) -> None:
        self.nodes[name] = node_report(name, **kw)
        self.pods.setdefault(name, {})

    def _up(self, node: str) -> None:
        if node in self.down or node not in self.nodes:
            raise AgentUnavailable(node, "connection refused")

    async def get_node(self, node: str, url: str) -> dict[str, Any]:
        self._up(node)
        return copy.deepcopy(self.nodes[node])

    async def list_pods(self, node: str, url: str) -> list[dict[str, Any]]:
        self._up(node)
        return [copy.deepcopy(p) for p in self.pods[node].values()]

    async def get_pod(self, node: str, url: str, ns: str, name: str) -> dict[str, Any] | None:
        self._up(node)
        key = f"{ns}/{name}"
        left = self._left.get((node, key))
        if left is not None:
            if left <= 0:
                self.pods[node].pop(key, None)
                del self._left[(node, key)]
            else:
                self._left[(node, key)] = left - 1
        pod = self.pods[node].get(key)
        return copy.deepcopy(pod) if pod else None

    async def create_pod(self, node: str, url: str, manifest: dict[str, Any]) -> dict[str, Any]:
        self._up(node)
        key = f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
        self.calls.append(("create", node, key))
        await asyncio.sleep(0)
        if node in self.refuse:
            reason, message = self.refuse[node]
            raise AgentRefused(node, message, 422, reason)
        if key in self.pods[node]:
            raise AgentConflict(node, f'pods "{key}" already exists', 409, "AlreadyExists")
        pod = copy.deepcopy(manifest)
        pod["status"] = {"phase": "Running", "qosClass": "Burstable"}
        self.pods[node][key] = pod
        if self.on_create is not None:
            self.on_create(node, pod)
        return copy.deepcopy(pod)

    async def delete_pod(self, node: str, url: str, ns: str, name: str,
                         grace: int | None) -> dict[str, Any] | None:
        self._up(node)
        key = f"{ns}/{name}"
        self.calls.append(("delete", node, key))
        pod = self.pods[node].get(key)
        if pod is None:
            return None
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        if self.linger == 0:
            del self.pods[node][key]
        else:
            self._left[(node, key)] = self.linger
        return copy.deepcopy(pod)

    async def close(self) -> None:
        pass

    def where(self, key: str) -> list[str]:
        return [n for n, pods in self.pods.items() if key in pods]


def make_service(agents: FakeAgents, *, store: SchedulerStore | None = None, clock: Clock | None = None,
                 **config: Any) -> SchedulerService:
    data: dict[str, Any] = {"nodes": [{"name": n, "url": f"http://{n}.test:10250"} for n in agents.nodes],
                            "authentication": "none", "podInitialBackoff": "50ms",
                            "podMaxBackoff": "200ms", "nodePollInterval": "1h"}
    data.update(config)
    return build_scheduler(parse_scheduler_config(data, "test"), store=store or SchedulerMemoryStore(),
                           agents=agents, clock=clock)


async def settle(svc: SchedulerService, rounds: int = 3, pause: float = 0.02) -> None:
    """Let the loop schedule and the binds and deletions finish."""
    for _ in range(rounds):
        await asyncio.sleep(pause)
        await svc.binder.drain()
        await svc.store.flush()


async def wait_for(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
