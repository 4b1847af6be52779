"""/metrics/resource: the kubelet's resource metrics in the Prometheus text format (pure).

The families, help texts, stability tags, labels and timestamps of the kubelet's resource
metrics collector (pkg/kubelet/metrics/collectors/resource_metrics.go), and the text its Go
client writes: families sorted by name, series sorted by label values, label names sorted,
values as Go's strconv 'g' shortest form ("10", "1.6243962483020916e+09"), sample timestamps in
whole milliseconds. A family without series is left out; a failed snapshot gives only
resource_scrape_error 1.

Left out as the kubelet leaves them out here: the swap families (pods run without swap),
node_memory_commit_bytes (Windows). scrape_error is not written: it was deprecated in 1.29 and
component-base hides a metric deprecated for more than one release, so current kubelets do not
serve it.

Hand-written rather than through prometheus_client: its text writer prints integral values as
"10.0" where the Go client prints "10", and the point is the kubelet's exact text.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from nodeagent.agent.stats.values import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    type: str
    help: str


_NODE_CPU = _Family("node_cpu_usage_seconds_total", "counter",
                    "[STABLE] Cumulative cpu time consumed by the node in core-seconds")
_NODE_MEMORY = _Family("node_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the node in bytes")
_CONTAINER_CPU = _Family("container_cpu_usage_seconds_total", "counter",
                         "[STABLE] Cumulative cpu time consumed by the container in core-seconds")
_CONTAINER_MEMORY = _Family("container_memory_working_set_bytes", "gauge",
                            "[STABLE] Current working set of the container in bytes")
_CONTAINER_START = _Family("container_start_time_seconds", "gauge",
                           "[STABLE] Start time of the container since unix epoch in seconds")
_POD_CPU = _Family("pod_cpu_usage_seconds_total", "counter",
                   "[STABLE] Cumulative cpu time consumed by the pod in core-seconds")
_POD_MEMORY = _Family("pod_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the pod in bytes")
_SCRAPE_ERROR = _Family("resource_scrape_error", "gauge",
                        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise")

# (label pairs, value, timestamp in epoch seconds or None)
_Series = tuple[tuple[tuple[str, str], ...], float, float | None]


def go_float(value: float) -> str:
    """A float64 as Go's Prometheus text writer prints it: strconv.FormatFloat(f, 'g', -1, 64)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that round-trip, the same digits Go's shortest mode finds
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()  # no leading zeros for a non-zero value
    assert isinstance(exponent, int)
    padded = "".join(map(str, digit_tuple))
    digits = padded.rstrip("0")  # "100.0" has digits 1000 and exponent -1: 1 and 2
    exponent += len(padded) - len(digits)
    point = len(digits) + exponent  # the decimal point sits after this many digits
    exp10 = point - 1
    if exp10 < -4 or exp10 >= 6:  # shortest mode: %e when the exponent is < -4 or >= 6
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _timestamp_ms(t: float) -> int:
    """Whole milliseconds, truncated as Go's t.Unix()*1000 + t.Nanosecond()/1e6."""
    return math.floor(t * 1000)


def _families(snap: Snapshot | None) -> Iterator[tuple[_Family, list[_Series]]]:
    if snap is None:
        yield _SCRAPE_ERROR, [((), 1.0, None)]
        return
    node = snap.node
    container_cpu: list[_Series] = []
    container_memory: list[_Series] = []
    container_start: list[_Series] = []
    pod_cpu: list[_Series] = []
    pod_memory: list[_Series] = []
    for pod in snap.pods:
        pod_labels = (("namespace", pod.namespace), ("pod", pod.name))
        for c in pod.containers:
            labels = (("container", c.name), *pod_labels)
            if c.start_time is not None and c.start_time >= 1:  # the kubelet skips StartTime.Unix() <= 0
                container_start.append((labels, c.start_time, None))
            if c.cpu is not None:
                container_cpu.append((labels, c.cpu.usage_core_nano_seconds / 1e9, c.cpu.time))
            if c.memory is not None:
                container_memory.append((labels, float(c.memory.working_set_bytes), c.memory.time))
        if pod.cpu is not None:
            pod_cpu.append((pod_labels, pod.cpu.usage_core_nano_seconds / 1e9, pod.cpu.time))
        if pod.memory is not None:
            pod_memory.append((pod_labels, float(pod.memory.working_set_bytes), pod.memory.time))
    yield _CONTAINER_CPU, container_cpu
    yield _CONTAINER_MEMORY, container_memory
    yield _CONTAINER_START, container_start
    yield _NODE_CPU, [((), node.cpu.usage_core_nano_seconds / 1e9, node.cpu.time)] if node.cpu else []
    yield _NODE_MEMORY, [((), float(node.memory.working_set_bytes), node.memory.time)] if node.memory else []
    yield _POD_CPU, pod_cpu
    yield _POD_MEMORY, pod_memory
    yield _SCRAPE_ERROR, [((), 0.0, None)]


def resource_metrics(snap: Snapshot | None) -> str:
    """The /metrics/resource body for `snap`; None means the stats could not be had (error 1)."""
    out: list[str] = []
    for family, series in sorted(_families(snap), key=lambda f: f[0].name):
        if not series:
            continue
        out.append(f"# HELP {family.name} {_escape_help(family.help)}\n# TYPE {family.name} {family.type}\n")
        # the Go client orders series by their label values (label names sorted), then by time
        for labels, value, ts in sorted(series, key=lambda s: ([v for _, v in s[0]], s[2] or 0.0)):
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            line = family.name + ("{" + text + "}" if text else "") + " " + go_float(value)
            out.append(line + (f" {_timestamp_ms(ts)}\n" if ts is not None else "\n"))
    return "".join(out)


__all__ = ["CONTENT_TYPE", "go_float", "resource_metrics"]
