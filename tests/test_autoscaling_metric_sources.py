"""The HPA's Pods and External metric sources: metrics.external (selector -> PromQL, the query's
answer -> samples, the API list objects) and hpa.source.WindowReader's pods_metric/external_metric."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.cluster.apiserver.custom_metrics_api import external_config
from nodeagent.cluster.autoscaling.hpa.pods import MetricError, PodInfo, PodMetric
from nodeagent.cluster.autoscaling.hpa.source import WindowReader, external_key
from nodeagent.cluster.autoscaling.metrics.external import (
    DEFAULT_QUERY,
    ExternalConfig,
    ExternalMetricError,
    ExternalRule,
    ObjectValue,
    Sample,
    custom_value_list,
    external_value_list,
    label_matchers,
    parse_query_result,
    render,
    selector_from_dict,
)
from nodeagent.cluster.autoscaling.metrics.window import SampleWindow
from nodeagent.cluster.serverconfig import parse_server_config
from nodeagent.daemonkit.configfile import ConfigError

T = 1_700_000_000.0
NS = 1_000_000_000


@pytest.mark.parametrize(("selector", "matchers"), [
    (None, ""),
    ({}, ""),
    ({"matchLabels": {"queue": "orders"}}, 'queue="orders"'),
    ({"matchLabels": {"b": "2", "a": "1"}}, 'a="1",b="2"'),
    ({"matchExpressions": [{"key": "q", "operator": "In", "values": ["a.b", "c"]}]}, 'q=~"a\\\\.b|c"'),
    ({"matchExpressions": [{"key": "q", "operator": "NotIn", "values": ["x"]}]}, 'q!~"x"'),
    ({"matchExpressions": [{"key": "q", "operator": "Exists"}]}, 'q!=""'),
    ({"matchExpressions": [{"key": "q", "operator": "DoesNotExist"}]}, 'q=""'),
    ({"matchLabels": {"q": 'say "hi"\\'}}, 'q="say \\"hi\\"\\\\"'),
])
def test_selectors_become_prometheus_label_matchers(selector: dict[str, Any] | None, matchers: str) -> None:
    assert label_matchers(selector_from_dict(selector)) == matchers


@pytest.mark.parametrize(("selector", "field"), [
    ({"matchExpressions": [{"key": "q", "operator": "Gt", "values": ["1"]}]}, "metricSelector.matchExpressions[0].operator"),
    ({"matchExpressions": [{"key": "q", "operator": "In"}]}, "metricSelector.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "q", "operator": "Exists", "values": ["a"]}]},
     "metricSelector.matchExpressions[0].values"),
    ({"matchLabels": {"app.kubernetes.io/name": "x"}}, "labelSelector"),  # not a Prometheus label name
])
def test_bad_selectors_name_the_field(selector: dict[str, Any], field: str) -> None:
    with pytest.raises(ExternalMetricError) as e:
        label_matchers(selector_from_dict(selector))
    assert e.value.field_path == field


@pytest.mark.parametrize(("template", "name", "selector", "query"), [
    (DEFAULT_QUERY, "queue_messages", {"matchLabels": {"queue": "orders"}}, 'queue_messages{queue="orders"}'),
    (DEFAULT_QUERY, "up", None, "up{}"),
    ("sum(queue_messages{<<.LabelMatchers>>})", "queue_depth", {"matchLabels": {"q": "a"}}, 'sum(queue_messages{q="a"})'),
    ('sum(rate(<<.Series>>{namespace="<<.Namespace>>"}[1m]))', "http_requests_total", None,
     'sum(rate(http_requests_total{namespace="prod"}[1m]))'),
])
def test_rules_render_prometheus_adapters_templates(template: str, name: str, selector: dict[str, Any] | None,
                                                    query: str) -> None:
    assert render(template, name, selector_from_dict(selector), "prod") == query


def test_a_metric_name_prometheus_cannot_hold_is_refused_and_rules_pick_the_template() -> None:
    with pytest.raises(ExternalMetricError) as e:
        render(DEFAULT_QUERY, "queue-depth", selector_from_dict(None), "d")
    assert e.value.field_path == "metricName"
    assert ExternalConfig("http://p").template("anything") == DEFAULT_QUERY  # no rules: every name is a series
    ruled = ExternalConfig("http://p", (ExternalRule("queue_depth", "sum(q)"),))
    assert ruled.template("queue_depth") == "sum(q)" and ruled.template("other") is None


@pytest.mark.parametrize(("body", "samples"), [
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, []),
    ({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "q", "queue": "b"}, "value": [T, "2.5"]},
        {"metric": {"queue": "a"}, "value": [T + 1, "7"]}]}},
     [Sample({"queue": "b"}, 2500, T), Sample({"queue": "a"}, 7000, T + 1)]),
    ({"status": "success", "data": {"resultType": "scalar", "result": [T, "0.0015"]}}, [Sample({}, 1, T)]),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [T, "-1.9999"]}]}},
     [Sample({}, -1999, T)]),  # int64(v*1000): towards zero
])
def test_query_answers_become_samples_in_milli_units(body: dict[str, Any], samples: list[Sample]) -> None:
    assert parse_query_result(body) == samples


@pytest.mark.parametrize(("body", "message"), [
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "Prometheus query failed: bad_data: parse error"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "a matrix result, not a vector"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [T, "NaN"]}]}},
     "not finite"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [T, "+Inf"]}]}},
     "not finite"),
])
def test_failed_and_unusable_answers_raise(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ExternalMetricError, match=message):
        parse_query_result(body)


def test_the_list_objects_have_upstreams_shapes() -> None:
    ext = external_value_list("queue_depth", [Sample({"queue": "a"}, 2500, T)])
    assert ext == {"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": {},
                   "items": [{"metricName": "queue_depth", "metricLabels": {"queue": "a"},
                              "timestamp": "2023-11-14T22:13:20Z", "value": "2500m"}]}
    custom = custom_value_list("pod_cpu_usage_seconds", None, [ObjectValue("Pod", "d", "a", 250, T, 15.0)])
    assert custom == {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
                      "items": [{"describedObject": {"kind": "Pod", "namespace": "d", "name": "a", "apiVersion": "/v1"},
                                 "metric": {"name": "pod_cpu_usage_seconds", "selector": None},
                                 "timestamp": "2023-11-14T22:13:20Z", "windowSeconds": 15, "value": "250m"}]}


@pytest.fixture
def window() -> SampleWindow:
    """The agents' pod series as the scrape adds them: two 15 s scrapes of pods a and b, one of c."""
    w = SampleWindow(capacity=8, max_gap=20.0)
    for pod, cores, mem in (("a", 0.25, 100 << 20), ("b", 0.5, 300 << 20)):
        for t in (0.0, 15.0):
            w.add(("pod", "d", pod), T + t, round(cores * t * NS), mem)
    w.add(("pod", "d", "c"), T + 15.0, 0, 10)  # a single sample: no rate yet
    return w


def test_pods_metrics_are_the_agents_pod_series(window: SampleWindow) -> None:
    pods = [PodInfo("a"), PodInfo("b"), PodInfo("c"), PodInfo("gone")]
    reader = WindowReader(window, "d", pods, T + 20.0, 17.0, max_age=17.0)
    assert reader.pods_metric("pod_cpu_usage_seconds", None) == {"a": PodMetric(250, T + 15, 15.0),
                                                                 "b": PodMetric(500, T + 15, 15.0)}
    assert reader.pods_metric("pod_memory_working_set_bytes", {}) == {
        "a": PodMetric((100 << 20) * 1000, T + 15, 15.0), "b": PodMetric((300 << 20) * 1000, T + 15, 15.0)}
    # the series carry no labels of their own: a selector needing one selects nothing, its negation all
    with pytest.raises(MetricError, match="^no metrics returned from custom metrics API$"):
        reader.pods_metric("pod_cpu_usage_seconds", {"matchLabels": {"verb": "GET"}})
    assert len(reader.pods_metric("pod_cpu_usage_seconds",
                                  {"matchExpressions": [{"key": "verb", "operator": "DoesNotExist"}]})) == 2
    with pytest.raises(MetricError, match="could not find the metric requests_per_second for pods"):
        reader.pods_metric("requests_per_second", None)
    stale = WindowReader(window, "d", pods, T + 40.0, 17.0, max_age=17.0)
    with pytest.raises(MetricError, match="^no metrics returned from custom metrics API$"):
        stale.pods_metric("pod_cpu_usage_seconds", None)


@pytest.mark.parametrize(("described", "name", "selector", "expected"), [
    ({"kind": "Pod", "name": "a", "apiVersion": "v1"}, "pod_cpu_usage_seconds", None, (250, T + 15)),
    ({"kind": "Pod", "name": "b"}, "pod_memory_working_set_bytes", None, ((300 << 20) * 1000, T + 15)),
    ({"kind": "Node", "name": "n1", "apiVersion": "v1"}, "node_cpu_usage_seconds", {}, (2000, T + 15)),
    ({"kind": "Pod", "name": "c"}, "pod_cpu_usage_seconds", None, "could not find the metric pod_cpu_usage_seconds "
                                                                 "for pods c"),  # no rate yet
    ({"kind": "Pod", "name": "a"}, "node_cpu_usage_seconds", None, "could not find"),
    ({"kind": "Node", "name": "n1"}, "pod_cpu_usage_seconds", None, "could not find"),
    ({"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "pod_cpu_usage_seconds", None,
     "could not find the metric pod_cpu_usage_seconds for deployments web"),
    ({"kind": "Pod", "name": "a", "apiVersion": "example.com/v1"}, "pod_cpu_usage_seconds", None, "could not find"),
    ({"kind": "Pod", "name": "a"}, "pod_cpu_usage_seconds", {"matchLabels": {"verb": "GET"}}, "could not find"),
])
def test_object_metrics_are_one_pods_or_nodes_series(window: SampleWindow, described: dict[str, Any], name: str,
                                                     selector: dict[str, Any] | None,
                                                     expected: tuple[int, float] | str) -> None:
    for t in (0.0, 15.0):
        window.add(("node", "n1"), T + t, round(2.0 * t * NS), 1 << 30)
    reader = WindowReader(window, "d", [], T + 20.0, 17.0, max_age=17.0)
    if isinstance(expected, str):
        with pytest.raises(MetricError, match=f"^unable to fetch metrics from custom metrics API: .*{expected}"):
            reader.object_metric(name, described, selector)
    else:
        assert reader.object_metric(name, described, selector) == expected


def test_external_metrics_are_read_from_what_the_loop_fetched() -> None:
    sel = {"matchLabels": {"queue": "orders"}}
    fetched: dict[str, list[Sample] | ExternalMetricError] = {
        external_key("queue_depth", sel): [Sample({"queue": "orders"}, 30_000, T), Sample({}, 12_000, T)],
        external_key("queue_depth", None): [],
        external_key("broken", None): ExternalMetricError("unable to query Prometheus: connection refused"),
    }
    reader = WindowReader(None, "d", [], T, 17.0, external=fetched)
    assert reader.external_metric("queue_depth", sel) == ([30_000, 12_000], T)
    with pytest.raises(MetricError, match="^no metrics returned from external metrics API$"):
        reader.external_metric("queue_depth", None)
    with pytest.raises(MetricError, match="external metrics API: unable to query Prometheus: connection refused"):
        reader.external_metric("broken", None)
    with pytest.raises(MetricError, match="no external metrics API serves other"):
        reader.external_metric("other", None)
    with pytest.raises(MetricError, match="not a valid label selector operator"):
        reader.external_metric("queue_depth", {"matchExpressions": [{"key": "q", "operator": "Gt", "values": ["1"]}]})
    assert external_key("q", {"matchLabels": {"b": "1", "a": "2"}}) == external_key("q", {"matchLabels": {"a": "2", "b": "1"}})
    assert external_key("q", {"matchLabels": {"a": "1"}}) != external_key("q", {"matchLabels": {"a": "2"}})


@pytest.mark.parametrize(("data", "problem"), [
    ({"externalMetrics": {"prometheusURL": "ftp://p:9090"}}, "externalMetrics.prometheusURL"),
    ({"externalMetrics": {}}, "externalMetrics.prometheusURL"),
    ({"externalMetrics": {"prometheusURL": "http://p", "rules": [{"name": "queue-depth"}]}},
     "externalMetrics.rules[0].name"),
    ({"externalMetrics": {"prometheusURL": "http://p", "rules": [{"name": "q", "promql": "x"}]}}, "promql"),
])
def test_the_server_config_names_bad_external_metrics_keys(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_server_config(data, "t")
    assert any(problem in line for line in e.value.errors), e.value.errors


def test_the_server_config_builds_the_prometheus_source() -> None:
    config = parse_server_config({"externalMetrics": {"prometheusURL": "http://127.0.0.1:9090", "timeout": "2s",
                                                      "rules": [{"name": "queue_depth", "query": "sum(q)"}]}}, "t")
    assert external_config(config) == ExternalConfig("http://127.0.0.1:9090", (ExternalRule("queue_depth", "sum(q)"),),
                                                     2.0)
    assert external_config(parse_server_config({}, "t")) is None
