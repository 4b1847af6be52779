"""custom.metrics.k8s.io/v1beta2 (pods metrics) and external.metrics.k8s.io/v1beta1 in the server's API.

What prometheus-adapter serves through APIServices, served in process (as metrics.k8s.io is):

    GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/<ns>/pods/<name|*>/<metric>
            ?labelSelector= (Pod labels) &metricLabelSelector= (the series' labels)
    GET /apis/custom.metrics.k8s.io/v1beta2/nodes/<name|*>/<metric>          (the same, for Nodes)
    GET /apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/<metric>?labelSelector= (metric labels)

Pods (and Node) metrics are the agents' per-pod (per-node) series from the scrape's window
(hpa.source.POD_METRICS, NODE_METRICS), read as the HPA reads them (the last rate no older than a
scrape); external metrics come from Prometheus (metrics.external.PrometheusSource) when
`externalMetrics` is configured. Answers are
MetricValueList and ExternalMetricValueList; a metric nobody serves is 404, a bad selector 400, a
Prometheus that fails 500 with its reason, as the adapter answers.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from nodeagent.cluster.apiserver.encoding import json_response
from nodeagent.cluster.apiserver.metrics_api import MetricsAPI
from nodeagent.cluster.apiserver.requestinfo import RequestInfo
from nodeagent.cluster.autoscaling.hpa.source import NODE_METRICS, POD_METRICS, WindowReader
from nodeagent.cluster.autoscaling.metrics.external import (
    ExternalConfig,
    ExternalMetricError,
    ExternalRule,
    ObjectValue,
    PrometheusSource,
    custom_value_list,
    external_value_list,
)
from nodeagent.cluster.registry import errors
from nodeagent.cluster.registry.catalog import ResourceInfo
from nodeagent.cluster.registry.options import ListOptions
from nodeagent.cluster.serverconfig import ServerConfig
from nodeagent.core.selectors import LabelSelector, SelectorError, parse_label_selector

CUSTOM_GROUP, CUSTOM_VERSION = "custom.metrics.k8s.io", "v1beta2"
EXTERNAL_GROUP, EXTERNAL_VERSION = "external.metrics.k8s.io", "v1beta1"


def _parse(request: web.Request, param: str) -> LabelSelector:
    try:
        return parse_label_selector(request.query.get(param, ""))
    except SelectorError as e:
        raise errors.bad_request(f"{param}: unable to parse requirement: {e}") from None


def _custom_resources() -> tuple[ResourceInfo, ...]:
    pods = tuple(ResourceInfo(CUSTOM_GROUP, CUSTOM_VERSION, "MetricValueList", f"pods/{name}", "",
                              namespaced=True, verbs=("get",)) for name in sorted(POD_METRICS))
    return pods + tuple(ResourceInfo(CUSTOM_GROUP, CUSTOM_VERSION, "MetricValueList", f"nodes/{name}", "",
                                     namespaced=False, verbs=("get",)) for name in sorted(NODE_METRICS))


class CustomMetricsAPI:
    """custom.metrics.k8s.io/v1beta2 pods/<metric> over the metrics API's scrape window."""

    def __init__(self, metrics: MetricsAPI, window: float) -> None:
        self.metrics, self.window = metrics, window

    async def handle(self, request: web.Request, ri: RequestInfo) -> web.StreamResponse:
        if ri.version != CUSTOM_VERSION or ri.verb not in ("get", "list"):
            raise errors.path_not_found()
        nodes = ri.resource == "nodes"
        if not ri.name or not ri.subresource or (ri.resource, bool(ri.namespace)) not in (("pods", True),
                                                                                        ("nodes", False)):
            raise errors.path_not_found()  # namespaced pods and cluster-scoped nodes are served
        metric = ri.subresource
        resource = (NODE_METRICS if nodes else POD_METRICS).get(metric)
        if resource is None:
            raise errors.not_found(ri.resource, CUSTOM_GROUP, metric)
        selector = _parse(request, "labelSelector")
        metric_selector = _parse(request, "metricLabelSelector")
        listed = await self.metrics.registry.resource("", "v1", ri.resource).list(ri.namespace or None, ListOptions())
        names = [str((o.get("metadata") or {}).get("name") or "") for o in listed.items
                 if (ri.name == "*" or (o.get("metadata") or {}).get("name") == ri.name)
                 and selector.matches((o.get("metadata") or {}).get("labels"))]
        now = self.metrics.clock.wall()
        reader = WindowReader(self.metrics.store.window, ri.namespace, [], now, self.window, self.window)
        keys = [("node", n) if nodes else ("pod", ri.namespace, n) for n in names]
        values = reader.series(resource, keys) if metric_selector.matches({}) else [None] * len(keys)
        items = [ObjectValue("Node" if nodes else "Pod", ri.namespace, n, v.value, v.timestamp, v.window)
                 for n, v in zip(names, values, strict=True) if v is not None]
        if ri.name != "*" and not items:
            where = f"{ri.namespace}/{ri.name}" if ri.namespace else ri.name
            raise errors.not_found(ri.resource, CUSTOM_GROUP, f"{where}/{metric}")
        shown: dict[str, Any] | None = None
        if not metric_selector.empty:
            shown = {"matchExpressions": [{"key": r.key, "operator": r.operator, "values": list(r.values)}
                                          for r in metric_selector.requirements]}
        return json_response(custom_value_list(metric, shown, items))


class ExternalMetricsAPI:
    """external.metrics.k8s.io/v1beta1 over a PrometheusSource."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source = source

    async def handle(self, request: web.Request, ri: RequestInfo) -> web.StreamResponse:
        if ri.version != EXTERNAL_VERSION or ri.verb not in ("get", "list") or ri.name or not ri.namespace:
            raise errors.path_not_found()
        name = ri.resource
        if self.source.config.template(name) is None:
            raise errors.not_found(name, EXTERNAL_GROUP, name)
        selector = _parse(request, "labelSelector")
        try:
            samples = await self.source.samples(ri.namespace, name, selector)
        except ExternalMetricError as e:
            if e.field_path is not None:
                raise errors.bad_request(f"{e.field_path}: {e}") from None
            raise errors.internal(f"unable to fetch metrics: {e}") from None
        return json_response(external_value_list(name, samples))


def external_config(config: ServerConfig) -> ExternalConfig | None:
    ext = config.external_metrics
    if ext is None:
        return None
    return ExternalConfig(ext.prometheus_url, tuple(ExternalRule(r.name, r.query) for r in ext.rules), ext.timeout)


def add_custom_metrics(metrics: MetricsAPI, config: ServerConfig) -> PrometheusSource | None:
    """Serve both APIs next to metrics.k8s.io (controlplane.py calls this); the Prometheus source,
    when configured, is also the HPA's."""
    custom = CustomMetricsAPI(metrics, metrics.store.rate_window)
    metrics.add_group(CUSTOM_GROUP, custom.handle, _custom_resources())
    ext = external_config(config)
    if ext is None:
        return None
    source = PrometheusSource(ext)
    resources = tuple(ResourceInfo(EXTERNAL_GROUP, EXTERNAL_VERSION, "ExternalMetricValueList", r.name, "",
                                   namespaced=True, verbs=("get",)) for r in ext.rules)
    metrics.add_group(EXTERNAL_GROUP, ExternalMetricsAPI(source).handle, resources)
    return source
