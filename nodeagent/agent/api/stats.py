"""The kubelet's resource-usage endpoints: GET /metrics/resource and GET|POST /stats/summary.

Both render the sampler's latest snapshot (nothing is read from the kernel per request, so a
scrape costs the same however often it comes). The routes are added to an existing application
with `add_stats_routes(app, source)`; the application's middlewares (status, auth, metrics) apply.
"""

from __future__ import annotations

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


STATS: web.AppKey[StatsSource] = web.AppKey("stats", StatsSource)


async def get_resource_metrics(request: web.Request) -> web.Response:
    """Always 200, as the kubelet: a missing snapshot is resource_scrape_error 1."""
    body = resource_metrics(request.app[STATS].current())
    return web.Response(body=body.encode(), headers={"Content-Type": CONTENT_TYPE})


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
    return web.json_response(summary(snap, only_cpu_and_memory=only_cpu_and_memory(request)))


def add_stats_routes(app: web.Application, source: StatsSource) -> None:
    app[STATS] = source
    app.router.add_get(RESOURCE_METRICS_PATH, get_resource_metrics)
    app.router.add_get(SUMMARY_PATH, get_summary)
    app.router.add_post(SUMMARY_PATH, get_summary)


__all__ = ["RESOURCE_METRICS_PATH", "STATS", "SUMMARY_PATH", "StatsSource", "add_stats_routes", "only_cpu_and_memory"]
