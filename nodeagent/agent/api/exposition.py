"""The Prometheus text format (0.0.4) for the agent's few metric families, written by hand.

prometheus_client cost every agent ~1 MiB of resident memory (its package imports its exposition
module, and that brings http.server, socketserver, wsgiref, urllib.request and gzip) for what the
agent uses of it: families of samples built at scrape time, two labelled histograms and the text
format. The text is the one prometheus_client 0.26 printed, sample for sample: label names sorted,
floats as Go prints them, a counter's HELP and TYPE under its `_total` name, untyped as
`untyped`, a histogram's `_created` series as a gauge family of its own (tests/test_metrics.py
parses it back with prometheus_client's parser, which the tests may import).

Not thread-safe by design: every observation and every scrape runs on the agent's event loop.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

# The header prometheus_client 0.26 sent with this text (its CONTENT_TYPE_LATEST): the 0.0.4 text
# is valid 1.0.0 text, which only adds quoted UTF-8 names the agent does not use.
CONTENT_TYPE_LATEST = "text/plain; version=1.0.0; charset=utf-8"

Sample = tuple[str, Mapping[str, str], float]


def format_value(value: float) -> str:
    """A sample value or bucket bound as Go's strconv prints it (prometheus_client's floatToGoString)."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help(doc: str) -> str:
    return doc.replace("\\", r"\\").replace("\n", r"\n")


class Family:
    """One metric family: name, help, type (gauge, counter, untyped, histogram) and samples.
    A counter is named without `_total`; its samples and its HELP/TYPE lines carry it."""

    def __init__(self, name: str, doc: str, kind: str, labels: Sequence[str] = ()) -> None:
        self.name, self.doc, self.kind, self.labels = name, doc, kind, tuple(labels)
        self.samples: list[Sample] = []

    def add_metric(self, values: Sequence[str], value: float, suffix: str = "") -> None:
        """A sample with these label values (in the order of `labels`)."""
        self.add_sample(self.name + (suffix or ("_total" if self.kind == "counter" else "")),
                        dict(zip(self.labels, values, strict=True)), value)

    def add_sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.samples.append((name, labels, value))

    def text(self) -> str:
        shown = self.name + "_total" if self.kind == "counter" else self.name
        kind = "untyped" if self.kind == "unknown" else self.kind
        lines = [f"# HELP {shown} {_help(self.doc)}", f"# TYPE {shown} {kind}"]
        for name, labels, value in self.samples:
            if labels:
                pairs = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
                lines.append(f"{name}{{{pairs}}} {format_value(value)}")
            else:
                lines.append(f"{name} {format_value(value)}")
        return "\n".join(lines) + "\n"


def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Family:
    return Family(name, doc, "gauge", labels)


def counter(name: str, doc: str, labels: Sequence[str] = (), value: float | None = None) -> Family:
    """A counter family; with `value`, its one unlabelled sample."""
    family = Family(name, doc, "counter", labels)
    if value is not None:
        family.add_metric([], value)
    return family


class _Series:
    """One label set of a histogram: counts per bucket (not cumulative), the sum, when made."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose bound is >= it (the last bound is +Inf)."""
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.total += value


class Histogram:
    """A histogram with labels, as prometheus_client's: `labels(**values).observe(x)`."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], buckets: Iterable[float]) -> None:
        self.name, self.doc, self.label_names = name, doc, tuple(labels)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = bounds
        self._series: dict[tuple[str, ...], _Series] = {}

    def labels(self, **values: str) -> _Series:
        key = tuple(str(values[n]) for n in self.label_names)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(self._bounds)
        return series

    def families(self) -> Iterator[Family]:
        """The histogram family, then its `_created` gauge family (as prometheus_client prints them)."""
        main = Family(self.name, self.doc, "histogram", self.label_names)
        created = gauge(self.name + "_created", self.doc, self.label_names)
        for key, series in list(self._series.items()):
            labels = dict(zip(self.label_names, key, strict=True))
            cumulative = 0
            for bound, count in zip(self._bounds, series.counts, strict=True):
                cumulative += count
                main.add_sample(self.name + "_bucket", {**labels, "le": format_value(bound)}, cumulative)
            main.add_sample(self.name + "_count", labels, cumulative)
            main.add_sample(self.name + "_sum", labels, series.total)
            created.add_sample(self.name + "_created", labels, series.created)
        yield main
        if created.samples:
            yield created


def render(families: Iterable[Family]) -> bytes:
    """The text format of these families, in order."""
    return "".join(f.text() for f in families).encode()
