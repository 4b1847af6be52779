"""The agent's parts as its HTTP API sees them: the AgentBackend (api/backend.py) and the
SnapshotProvider for /metrics (api/metrics.py), each method written out.

Pods come from the PodManager, plus one entry per static pod file that cannot be run (so
operators see it in the pod list); the node from the NodeReporter; events from the recorder;
a reload from the daemon (a callable, so the API never holds the daemon).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.agent.api.backend import AgentBackend
from nodeagent.agent.api.metrics import (
    Metrics,
    NodeSnapshot,
    SnapshotProvider,
    pod_samples,
    quantity_numbers,
    signal_samples,
    threshold_samples,
)
from nodeagent.agent.config.reload import ReloadResult
from nodeagent.agent.events import EventRecorder
from nodeagent.agent.eviction.manager import EvictionManager, PassResult
from nodeagent.agent.node.reporter import NodeReporter
from nodeagent.agent.pods.errors import AdmissionError
from nodeagent.agent.pods.manager import PodManager
from nodeagent.agent.pods.static_sync import StaticPodSync
from nodeagent.agent.probes.exec_probe import ExecTarget
from nodeagent.agent.runtime.attach import AttachTarget
from nodeagent.agent.runtime.logs import LogSource
from nodeagent.core.clock import Clock

CHECKPOINT_PROBLEMS_ANNOTATION = "nodeagent.io/checkpoint-problems"


class Backend(AgentBackend, SnapshotProvider):
    def __init__(self, *, pods: PodManager, reporter: NodeReporter, static: StaticPodSync, events: EventRecorder,
                 eviction: EvictionManager, reload: Callable[[], Awaitable[ReloadResult]]) -> None:
        self.pods = pods
        self.reporter = reporter
        self.static = static
        self.recorder = events
        self.eviction = eviction
        self._reload = reload

    # ---- AgentBackend ----
    def node(self) -> dict[str, Any]:
        node = self.reporter.node()
        problems = self.pods.restore_problems
        if problems:  # checkpoints found unreadable at the last start (moved aside): an operator must know
            node["metadata"].setdefault("annotations", {})[CHECKPOINT_PROBLEMS_ANNOTATION] = "\n".join(problems)
        return node

    def list_pods(self) -> list[dict[str, Any]]:
        return self.pods.list_pods() + self.static.error_entries()

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get_pod(namespace, name)

    async def create_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.pods.create_pod(manifest)
        except AdmissionError as e:  # a refused pod leaves no object: the event (and its log line) tells
            meta = manifest.get("metadata") or {}
            self.recorder.record(e.reason, e.message, namespace=str(meta.get("namespace") or "default"),
                                 name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""))
            raise

    async def delete_pod(self, namespace: str, name: str, grace_period: int | None) -> dict[str, Any] | None:
        return await self.pods.delete_pod(namespace, name, grace_period)

    async def resize_pod(self, namespace: str, name: str, patch: dict[str, Any],
                         patch_type: str) -> dict[str, Any] | None:
        return await self.pods.resize_pod(namespace, name, patch, patch_type)

    def log_source(self, namespace: str, name: str, container: str | None, previous: bool) -> LogSource | None:
        return self.pods.log_source(namespace, name, container, previous)

    def exec_target(self, namespace: str, name: str, container: str | None) -> ExecTarget | None:
        return self.pods.exec_target(namespace, name, container)

    def attach_target(self, namespace: str, name: str, container: str | None) -> AttachTarget | None:
        return self.pods.attach_target(namespace, name, container)

    def events(self) -> list[dict[str, Any]]:
        return self.recorder.list()

    async def reload_config(self) -> dict[str, Any]:
        return (await self._reload()).to_dict()

    # ---- SnapshotProvider ----
    def metrics_snapshot(self) -> NodeSnapshot:
        """In-memory values only (called on the loop at every scrape)."""
        observations = self.eviction.last_observations
        return NodeSnapshot(
            capacity=quantity_numbers(self.reporter.capacity.as_quantities()),
            allocatable=quantity_numbers(self.reporter.allocatable.allocatable),
            pods=pod_samples(self.pods.list_pods()),
            evictions=dict(self.eviction.evictions_total),
            signals=signal_samples(observations),
            thresholds=threshold_samples(self.eviction.thresholds, observations),
            conditions=self.eviction.conditions,
            checkpoint_problems=len(self.pods.restore_problems),
            journal_commits=self.pods.journal.stats.commits,
            journal_batches=self.pods.journal.stats.batches,
        )


def reaction_observer(metrics: Metrics, clock: Clock) -> Callable[[PassResult], None]:
    """An eviction pass hook: from the stats that met the threshold to the victims gone (the pass
    awaited the kills), into nodeagent_eviction_reaction_seconds."""

    def observe(result: PassResult) -> None:
        if result.evicted and result.signal and result.observed is not None and result.observed.time:
            metrics.observe_eviction_reaction(result.signal, clock.now() - result.observed.time)

    return observe
