"""The agent's own Prometheus text writer against prometheus_client's, byte for byte."""

from __future__ import annotations

import math
import re

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client import Histogram as ClientHistogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString

from nodeagent.agent.api.exposition import Family, Histogram, counter, format_value, gauge, render

VALUES = [0.0, -0.0, 1.0, 0.3, 1e-9, 123456.0, 1234567.0, 8.589934592e9, 1e21, -5e7, 3.22, math.inf, -math.inf,
          math.nan, 110, 2**53, 7 * (1 << 30)]


@pytest.mark.parametrize("value", VALUES)
def test_values_print_as_prometheus_client_prints_them(value: float) -> None:
    assert format_value(value) == floatToGoString(value)


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def test_families_print_as_prometheus_client_prints_them() -> None:
    doc = 'Help with a \\ backslash\nand a newline and "quotes".'
    labels = ["b", "a"]
    odd = ['x"y', "back\\slash\nnewline"]

    ours = [gauge("g", doc, labels), counter("c", doc, labels), counter("c1", doc, value=3),
            Family("u", doc, "unknown")]
    theirs: list[Metric] = [GaugeMetricFamily("g", doc, labels=labels), CounterMetricFamily("c", doc, labels=labels),
                            CounterMetricFamily("c1", doc, value=3), Metric("u", doc, "unknown")]
    for i, v in enumerate([1.5, 0, 1e10]):
        for mine, ref in zip(ours[:2], theirs[:2], strict=True):
            mine.add_metric([odd[i % 2], str(i)], v)
            ref.add_metric([odd[i % 2], str(i)], v)  # type: ignore[attr-defined]
    ours[3].add_sample("u", {"signal": "memory.available"}, 4)
    theirs[3].add_sample("u", {"signal": "memory.available"}, 4)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(theirs))  # type: ignore[arg-type]
    assert render(ours) == generate_latest(registry)


def test_histograms_print_as_prometheus_client_prints_them() -> None:
    buckets = (0.01, 0.025, 0.5, 10.0)
    registry = CollectorRegistry(auto_describe=False)
    ref = ClientHistogram("h_seconds", "A histogram.", ["signal", "code"], buckets=buckets, registry=registry)
    ours = Histogram("h_seconds", "A histogram.", ["signal", "code"], buckets)
    assert render(ours.families()) == generate_latest(registry)  # no series yet: HELP and TYPE only
    for signal, code, v in [("memory", "200", 0.01), ("memory", "200", 0.3), ("disk", "404", 99.0),
                            ("memory", "200", 0.0), ("disk", "404", 0.025)]:
        ref.labels(signal=signal, code=code).observe(v)
        ours.labels(signal=signal, code=code).observe(v)
    created = re.compile(rb"(_created\{[^}]*\}) \S+")
    assert created.sub(rb"\1 T", render(ours.families())) == created.sub(rb"\1 T", generate_latest(registry))
