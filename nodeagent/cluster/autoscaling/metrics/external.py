"""External metrics from Prometheus, and the custom/external metrics API objects (upstream's shapes).

The HPA's `type: External` metrics are what prometheus-adapter serves through
external.metrics.k8s.io: a rule maps a metric name to a PromQL template, the HPA's (or the API
caller's) metric selector becomes label matchers, and each sample of the instant query's result
is one ExternalMetricValue (its labels, the query's time, the value as a milli-quantity, as the
adapter's resource.NewMilliQuantity(int64(v*1000))). Templates know prometheus-adapter's
`<<.Series>>` (the metric name), `<<.LabelMatchers>>` and `<<.Namespace>>`; without any rule a
metric name is the Prometheus series of that name (`<<.Series>>{<<.LabelMatchers>>}`).

The pure parts (selector -> matchers, rendering, the result's parsing, the list objects) are
table-tested; `PrometheusSource` is the thin aiohttp client over /api/v1/query.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import structlog

from nodeagent.core.quantity import Quantity
from nodeagent.core.selectors import LabelSelector, Requirement
from nodeagent.core.timefmt import rfc3339

log = structlog.get_logger(__name__)

EXTERNAL_API_VERSION = "external.metrics.k8s.io/v1beta1"
CUSTOM_API_VERSION = "custom.metrics.k8s.io/v1beta2"
DEFAULT_QUERY = "<<.Series>>{<<.LabelMatchers>>}"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


class ExternalMetricError(Exception):
    """The metric could not be had; `field` names the bad input when it is the caller's (422/400)."""

    def __init__(self, message: str, field_path: str | None = None) -> None:
        super().__init__(message)
        self.field_path = field_path


@dataclass(frozen=True, slots=True)
class Sample:
    """One ExternalMetricValue: the series' labels, its value in milli-units, the query's time."""

    labels: Mapping[str, str]
    milli_value: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class ExternalRule:
    """prometheus-adapter's externalRules, kept small: a metric name and its query template."""

    name: str
    query: str = DEFAULT_QUERY


@dataclass(frozen=True, slots=True)
class ExternalConfig:
    """Where Prometheus is and which names it answers; no rules: every name is its own series."""

    url: str
    rules: tuple[ExternalRule, ...] = ()
    timeout: float = 5.0

    def template(self, name: str) -> str | None:
        if not self.rules:
            return DEFAULT_QUERY
        return next((r.query for r in self.rules if r.name == name), None)


def selector_from_dict(selector: Mapping[str, Any] | None, path: str = "metricSelector") -> LabelSelector:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as a LabelSelector; bad ones raise."""
    if not selector:
        return LabelSelector()
    reqs: list[Requirement] = []
    for k, v in sorted((selector.get("matchLabels") or {}).items()):
        reqs.append(Requirement(str(k), "=", (str(v),)))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        op = _OPERATORS.get(str(expr.get("operator")))
        if op is None:
            raise ExternalMetricError(f"{expr.get('operator')!r} is not a valid label selector operator",
                                      f"{path}.matchExpressions[{i}].operator")
        values = tuple(str(v) for v in expr.get("values") or ())
        if (op in ("in", "notin")) != bool(values):
            raise ExternalMetricError("values must be non-empty for In/NotIn and empty for Exists/DoesNotExist",
                                      f"{path}.matchExpressions[{i}].values")
        reqs.append(Requirement(str(expr.get("key", "")), op, values))  # type: ignore[arg-type]
    return LabelSelector(tuple(reqs))


def _string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _alternation(values: Sequence[str]) -> str:
    return _string("|".join(re.escape(v) for v in values))


def label_matchers(selector: LabelSelector) -> str:
    """PromQL label matchers for a selector, as prometheus-adapter writes them (In as a regex)."""
    out: list[str] = []
    for r in selector.requirements:
        if not _LABEL_NAME.match(r.key):
            raise ExternalMetricError(f"{r.key!r} is not a valid Prometheus label name", "labelSelector")
        if r.operator in ("=", "=="):
            out.append(f"{r.key}={_string(r.values[0])}")
        elif r.operator == "!=":
            out.append(f"{r.key}!={_string(r.values[0])}")
        elif r.operator == "in":
            out.append(f"{r.key}=~{_alternation(r.values)}")
        elif r.operator == "notin":
            out.append(f"{r.key}!~{_alternation(r.values)}")
        elif r.operator == "exists":
            out.append(f'{r.key}!=""')
        elif r.operator == "!":
            out.append(f'{r.key}=""')
        else:
            raise ExternalMetricError(f"operator {r.operator!r} has no Prometheus label matcher", "labelSelector")
    return ",".join(out)


def render(template: str, name: str, selector: LabelSelector, namespace: str) -> str:
    """The PromQL query of a rule for one metric name, selector and namespace."""
    if not _METRIC_NAME.match(name):
        raise ExternalMetricError(f"{name!r} is not a valid Prometheus metric name", "metricName")
    return (template.replace("<<.Series>>", name).replace("<<.LabelMatchers>>", label_matchers(selector))
            .replace("<<.Namespace>>", namespace))


def _milli(text: object) -> int:
    try:
        value = float(str(text))
    except ValueError:
        raise ExternalMetricError(f"Prometheus returned a value that is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ExternalMetricError(f"Prometheus returned a value that is not finite: {text!r}")
    return int(value * 1000)  # the adapter's int64(value*1000): towards zero


def parse_query_result(body: Mapping[str, Any]) -> list[Sample]:
    """The samples of a /api/v1/query answer (vector or scalar); an error answer raises."""
    if body.get("status") != "success":
        raise ExternalMetricError(f"Prometheus query failed: {body.get('errorType', '')}: {body.get('error', '')}")
    data = body.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return [Sample({}, _milli(result[1]), float(result[0]))]
    if kind != "vector" or not isinstance(result, list):
        raise ExternalMetricError(f"Prometheus returned a {kind} result, not a vector")
    out: list[Sample] = []
    for item in result:
        metric, value = item.get("metric") or {}, item.get("value") or [0, "NaN"]
        labels = {str(k): str(v) for k, v in sorted(metric.items()) if k != "__name__"}
        out.append(Sample(labels, _milli(value[1]), float(value[0])))
    return out


def external_value_list(name: str, samples: Iterable[Sample]) -> dict[str, Any]:
    """An ExternalMetricValueList (external.metrics.k8s.io/v1beta1)."""
    return {"kind": "ExternalMetricValueList", "apiVersion": EXTERNAL_API_VERSION, "metadata": {},
            "items": [{"metricName": name, "metricLabels": dict(s.labels), "timestamp": rfc3339(s.timestamp),
                       "value": str(Quantity.from_milli(s.milli_value))} for s in samples]}


@dataclass(frozen=True, slots=True)
class ObjectValue:
    """One MetricValue of the custom metrics API: the object it describes and its value."""

    kind: str
    namespace: str
    name: str
    milli_value: int
    timestamp: float
    window: float
    api_version: str = "/v1"


def custom_value_list(metric: str, selector: Mapping[str, Any] | None,
                      values: Iterable[ObjectValue]) -> dict[str, Any]:
    """A MetricValueList (custom.metrics.k8s.io/v1beta2), describedObject and metric as upstream."""
    ident: dict[str, Any] = {"name": metric, "selector": dict(selector) if selector else None}
    return {"kind": "MetricValueList", "apiVersion": CUSTOM_API_VERSION, "metadata": {},
            "items": [{"describedObject": {"kind": v.kind, **({"namespace": v.namespace} if v.namespace else {}),
                                           "name": v.name, "apiVersion": v.api_version},
                       "metric": ident, "timestamp": rfc3339(v.timestamp), "windowSeconds": round(v.window),
                       "value": str(Quantity.from_milli(v.milli_value))} for v in values]}


class ExternalSource(Protocol):
    """Where the HPA loop and the external metrics API get an external metric's samples."""

    async def samples(self, namespace: str, name: str, selector: LabelSelector) -> list[Sample]: ...


@dataclass
class PrometheusSource:
    """Instant queries against one Prometheus (GET /api/v1/query), one aiohttp session."""

    config: ExternalConfig
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    def query_for(self, namespace: str, name: str, selector: LabelSelector) -> str:
        template = self.config.template(name)
        if template is None:
            raise ExternalMetricError(f"no external metric rule serves {name}")
        return render(template, name, selector, namespace)

    async def samples(self, namespace: str, name: str, selector: LabelSelector) -> list[Sample]:
        """The metric's samples now; ExternalMetricError when there is no rule or Prometheus fails."""
        query = self.query_for(namespace, name, selector)
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        url = self.config.url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=self.config.timeout)) as resp:
                body = await resp.json(content_type=None)
        except (TimeoutError, OSError, aiohttp.ClientError, ValueError) as e:
            log.warning("external_metric_query_failed", metric=name, query=query, error=str(e) or type(e).__name__)
            raise ExternalMetricError(f"unable to query Prometheus: {str(e) or type(e).__name__}") from e
        if not isinstance(body, Mapping):
            raise ExternalMetricError("Prometheus returned an answer that is not an object")
        return parse_query_result(body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
