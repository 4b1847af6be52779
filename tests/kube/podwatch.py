"""A watch on the pods of a selector, with the official Python client, that checks the rollout
invariants on every event (so they are asserted while the rollout happens, not only at the end).
Shared by tests/test_kube_controllers.py (no agents) and integration/test_cluster_workloads.py
(real agents)."""

from __future__ import annotations

import threading
from typing import Any


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class PodWatch:
    """Follows the pods of `selector` in `ns` through `api` (a kubernetes.client.CoreV1Api) and
    keeps, over every state the watch showed, the fewest Ready pods not being deleted
    (`min_ready`) and the most pods not being deleted (`max_pods`)."""

    def __init__(self, api: Any, ns: str, selector: str, *, timeout_seconds: int = 120) -> None:
        from kubernetes import watch
        self.api, self.ns, self.selector = api, ns, selector
        self.pods: dict[str, dict[str, Any]] = {}
        self.events = 0
        self.min_ready: int | None = None
        self.max_pods = 0
        self.lock = threading.Lock()
        self.w = watch.Watch()
        self.timeout_seconds = timeout_seconds
        listed = self.api.list_namespaced_pod(ns, label_selector=selector)
        for p in listed.items:
            self.pods[p.metadata.name] = self.api.api_client.sanitize_for_serialization(p)
        self.rv = listed.metadata.resource_version
        self._observe()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _observe(self) -> None:
        live = [p for p in self.pods.values() if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in live if is_ready(p))
        self.min_ready = ready if self.min_ready is None else min(self.min_ready, ready)
        self.max_pods = max(self.max_pods, len(live))

    def _run(self) -> None:
        try:
            for ev in self.w.stream(self.api.list_namespaced_pod, self.ns, label_selector=self.selector,
                                    resource_version=self.rv, timeout_seconds=self.timeout_seconds):
                obj = self.api.api_client.sanitize_for_serialization(ev["object"])
                with self.lock:
                    if ev["type"] == "DELETED":
                        self.pods.pop(obj["metadata"]["name"], None)
                    else:
                        self.pods[obj["metadata"]["name"]] = obj
                    self.events += 1
                    self._observe()
        except Exception:  # the server going away (the restart tests) ends the watch
            return

    def stop(self) -> None:
        self.w.stop()
