"""Tables and wording for people: pure functions from API objects (plain dicts) to text.

No I/O and no clock: the caller passes `now` (epoch seconds), so every output is table-tested.
Values from the API may carry anything a pod author wrote, so table cells have control characters
escaped: a pod name or message cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeagent.core.duration import human_duration
from nodeagent.core.quantity import Quantity, parse_quantity

POD_COLUMNS = ("NAMESPACE", "NAME", "PHASE", "QOS", "RESTARTS", "AGE")
WIDE_COLUMNS = ("NAMESPACE", "NAME", "READY", "PHASE", "REASON", "QOS", "PRIORITY", "RESTARTS",
                "AGE", "CPU-REQ", "MEM-REQ")
EVENT_COLUMNS = ("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE")
RESOURCE_ORDER = ("cpu", "memory", "ephemeral-storage", "pods")
BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_GAP = "   "


def clean(value: object) -> str:
    """A cell's text with control characters (newlines, escapes) shown as \\xNN, never obeyed."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "") -> str:
    """Left-aligned columns three spaces apart, like kubectl; no trailing spaces."""
    cells = [[clean(h) for h in headers]] + [[clean(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [indent + _GAP.join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def parse_time(text: object) -> float | None:
    """RFC 3339 UTC (`2024-05-01T10:00:00Z`, as the agent writes it) to epoch seconds; None if
    absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def age(timestamp: object, now: float) -> str:
    t = parse_time(timestamp)
    return "<unknown>" if t is None else human_duration(max(0.0, now - t))


def human_bytes(n: int) -> str:
    """Bytes the way a person reads them: `512Mi`, `1.5Gi`, `900Ki`, `17` (binary units)."""
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= size:
            value = n / size
            text = f"{value:.0f}" if value >= 100 or n % size == 0 else f"{value:.1f}"
            return text.rstrip("0").rstrip(".") + unit if "." in text else text + unit
    return str(n)


def _quantity(text: object) -> Quantity | None:
    try:
        return parse_quantity(str(text))
    except (ValueError, TypeError):
        return None


def show_quantity(resource: str, q: Quantity | None) -> str:
    if q is None:
        return "-"
    return human_bytes(q.value()) if resource in BYTE_RESOURCES else str(q)


def _share(part: Quantity | None, whole: Quantity | None) -> str:
    if part is None or whole is None or whole.milli_value() <= 0:
        return ""
    return f" ({part.milli_value() * 100 // whole.milli_value()}%)"


# ---- pods ----
def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    status = pod.get("status")
    return status if isinstance(status, Mapping) else {}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    items = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = _status(pod).get("containerStatuses")
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def restarts(pod: Mapping[str, Any]) -> int:
    return sum(int(c.get("restartCount") or 0) for c in _container_statuses(pod))


def is_active(pod: Mapping[str, Any]) -> bool:
    """Holds node resources: has containers and is not Succeeded/Failed (the scheduler's view)."""
    return bool(_containers(pod)) and _status(pod).get("phase") not in TERMINAL_PHASES


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """Sum of the containers' requests (the agent reports them after defaulting from limits)."""
    total: dict[str, Quantity] = {}
    for c in _containers(pod):
        resources = c.get("resources")
        requests = resources.get("requests") if isinstance(resources, Mapping) else None
        for name, text in (requests.items() if isinstance(requests, Mapping) else ()):
            q = _quantity(text)
            if q is not None:
                total[name] = total[name] + q if name in total else q
    return total


def requested(pods: Iterable[Mapping[str, Any]]) -> dict[str, Quantity]:
    """What the active pods request together; `pods` counts them."""
    total: dict[str, Quantity] = {}
    count = 0
    for pod in pods:
        if not is_active(pod):
            continue
        count += 1
        for name, q in pod_requests(pod).items():
            total[name] = total[name] + q if name in total else q
    total["pods"] = Quantity.from_value(count, "DecimalSI")
    return total


def _started(pod: Mapping[str, Any]) -> object:
    return _status(pod).get("startTime") or _meta(pod).get("creationTimestamp")


def pod_row(pod: Mapping[str, Any], now: float) -> list[object]:
    status = _status(pod)
    return [_meta(pod).get("namespace", ""), _meta(pod).get("name", ""),
            status.get("phase") or "Unknown", status.get("qosClass") or "-", restarts(pod),
            age(_started(pod), now)]


def wide_row(pod: Mapping[str, Any], now: float) -> list[object]:
    ns, name, phase, qos, restart_count, pod_age = pod_row(pod, now)
    statuses = _container_statuses(pod)
    ready = f"{sum(1 for c in statuses if c.get('ready'))}/{len(_containers(pod)) or len(statuses)}"
    reason = _status(pod).get("reason") or ("Terminating" if _meta(pod).get("deletionTimestamp")
                                            else "-")
    spec = pod.get("spec")
    priority = spec.get("priority", 0) if isinstance(spec, Mapping) else "-"
    req = pod_requests(pod)
    return [ns, name, ready, phase, reason, qos, priority, restart_count, pod_age,
            show_quantity("cpu", req.get("cpu")), show_quantity("memory", req.get("memory"))]


def _sort_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(pod)
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def format_pods(pods: Iterable[Mapping[str, Any]], now: float, wide: bool = False,
                indent: str = "") -> str:
    ordered = sorted(pods, key=_sort_key)
    if wide:
        return table(WIDE_COLUMNS, (wide_row(p, now) for p in ordered), indent)
    return table(POD_COLUMNS, (pod_row(p, now) for p in ordered), indent)


# ---- node ----
def resource_rows(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """RESOURCE, CAPACITY, ALLOCATABLE, REQUESTED (% of allocatable), USED (% of allocatable)."""
    status = _status(node)
    maps: list[Mapping[str, Any]] = [m if isinstance(m := status.get(k), Mapping) else {}
                                     for k in ("capacity", "allocatable", "usage")]
    cap, alloc, usage = ({k: _quantity(v) for k, v in m.items()} for m in maps)
    req = requested(pods)
    names = [r for r in RESOURCE_ORDER if r in cap or r in alloc]
    names += sorted(n for n in {*cap, *alloc} if n not in RESOURCE_ORDER)
    rows = []
    for r in names:
        a = alloc.get(r)
        used = usage.get(r)
        asked = req.get(r, Quantity.from_value(0, "DecimalSI"))
        rows.append([r, show_quantity(r, cap.get(r)), show_quantity(r, a),
                     show_quantity(r, asked) + _share(asked, a),
                     show_quantity(r, used) + _share(used, a) if used is not None else "-"])
    return rows


def extra_usage(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Usage figures that are not a resource column, e.g. cpuUsageSeconds (CPU time used)."""
    usage = _status(node).get("usage")
    if not isinstance(usage, Mapping):
        return []
    out = []
    for key, value in sorted(usage.items()):
        if key in RESOURCE_ORDER:
            continue
        q = _quantity(value)
        if key == "cpuUsageSeconds" and q is not None:
            out.append(("CPU time used by pods", f"{q.milli_value() / 1000:.1f}s"))
        else:
            out.append((key, str(value)))
    return out


def format_status(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: float) -> str:
    """`nodeagent status`: the node, its conditions, resources and pods."""
    status = _status(node)
    out = [f"Node: {clean(_meta(node).get('name', '<unknown>'))}\n"]
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    out.append("\nConditions:\n")
    out.append(table(("TYPE", "STATUS", "SINCE", "MESSAGE"),
                     ([c.get("type", ""), c.get("status", ""),
                       age(c.get("lastTransitionTime"), now), c.get("message", "")]
                      for c in conditions), "  ") if conditions else "  (none reported)\n")
    out.append("\nResources:\n")
    out.append(table(("RESOURCE", "CAPACITY", "ALLOCATABLE", "REQUESTED", "USED"),
                     resource_rows(node, pods), "  "))
    for label, value in extra_usage(node):
        out.append(f"  {clean(label)}: {clean(value)}\n")
    out.append(f"\nPods ({sum(1 for p in pods if is_active(p))} active, {len(pods)} total):\n")
    out.append(format_pods(pods, now, indent="  ") if pods else "  (none)\n")
    return "".join(out)


# ---- events ----
def event_row(event: Mapping[str, Any], now: float) -> list[object]:
    obj = event.get("involvedObject")
    obj = obj if isinstance(obj, Mapping) else {}
    kind = str(obj.get("kind") or "").lower()
    ns, name = obj.get("namespace"), obj.get("name") or ""
    what = f"{ns}/{name}" if ns else name
    return [age(event.get("lastTimestamp") or event.get("firstTimestamp"), now),
            event.get("type", ""), event.get("reason", ""),
            f"{kind}/{what}" if kind else what, event.get("message", "")]


def format_events(events: Iterable[Mapping[str, Any]], now: float) -> str:
    """Oldest first, so the newest is next to the prompt (the API keeps them in order)."""
    return table(EVENT_COLUMNS, (event_row(e, now) for e in events))


__all__ = ["age", "clean", "format_events", "format_pods", "format_status", "human_bytes",
           "human_duration", "parse_time", "requested", "resource_rows", "table"]
