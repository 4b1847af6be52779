"""The kubelet's resource-usage endpoints: GET /metrics/resource and GET|POST /stats/summary.

Both render the sampler's latest snapshot (nothing is read from the kernel per request). A body
is rendered once per snapshot and kept until the next one (a few ms for 100 pods, on the loop),
so several scrapers of one snapshot cost one render. The routes are added to an existing
application with `add_stats_routes(app, source)`; its middlewares (status, auth, metrics) apply.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from nodeagent.agent.stats.prometheus import CONTENT_TYPE, resource_metrics
from nodeagent.agent.stats.summary import summary
from nodeagent.agent.stats.values import Snapshot
from nodeagent.daemonkit.status import StatusError

RESOURCE_METRICS_PATH = "/metrics/resource"
SUMMARY_PATH = "/stats/summary"


class StatsSource(Protocol):
    def current(self) -> Snapshot | None:
        """The latest snapshot, None when there is none worth serving (no pass yet, failed, stale)."""
        ...


class RenderCache:
    """The last body rendered per endpoint variant, with the snapshot it was rendered from."""

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[Snapshot | None, bytes]] = {}

    def get(self, key: str, snap: Snapshot | None, render: Callable[[], bytes]) -> bytes:
        cached = self._bodies.get(key)
        if cached is not None and cached[0] is snap:
            return cached[1]
        body = render()
        self._bodies[key] = (snap, body)
        return body


STATS: web.AppKey[StatsSource] = web.AppKey("stats", StatsSource)
RENDERED: web.AppKey[RenderCache] = web.AppKey("stats_rendered", RenderCache)


async def get_resource_metrics(request: web.Request) -> web.Response:
    """Always 200, as the kubelet: a missing snapshot is resource_scrape_error 1."""
    snap = request.app[STATS].current()
    body = request.app[RENDERED].get("metrics", snap, lambda: resource_metrics(snap).encode())
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def only_cpu_and_memory(request: web.Request) -> bool:
    """The kubelet's test: the parameter given exactly once, with the value "true"."""
    values = request.query.getall("only_cpu_and_memory", [])
    return len(values) == 1 and values[0] == "true"


async def get_summary(request: web.Request) -> web.Response:
    snap = request.app[STATS].current()
    if snap is None:
        raise StatusError(503, "resource stats are not available yet (the first sampling pass has not "
                               "completed, or the sampler is failing; see the agent log)",
                          reason="ServiceUnavailable")
    only = only_cpu_and_memory(request)
    body = request.app[RENDERED].get(f"summary-{only}", snap,
                                     lambda: json.dumps(summary(snap, only_cpu_and_memory=only)).encode())
    return web.Response(body=body, content_type="application/json")


def add_stats_routes(app: web.Application, source: StatsSource) -> None:
    app[STATS] = source
    app[RENDERED] = RenderCache()
    app.router.add_get(RESOURCE_METRICS_PATH, get_resource_metrics)
    app.router.add_get(SUMMARY_PATH, get_summary)
    app.router.add_post(SUMMARY_PATH, get_summary)


__all__ = ["RESOURCE_METRICS_PATH", "STATS", "SUMMARY_PATH", "StatsSource", "add_stats_routes", "only_cpu_and_memory"]
