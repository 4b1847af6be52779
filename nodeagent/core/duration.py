"""Go-style durations ("30s", "1m30s", "1.5h", "500ms"), as the kubelet config writes them, and
the human form kubectl shows in its AGE columns (`human_duration`).

Parsing follows Go's time.ParseDuration so KubeletConfiguration files mean the same thing here:
one optional sign, then one or more `<number><unit>` pairs, units ns, us (µs, μs), ms, s, m, h;
"0" alone is allowed; values are whole nanoseconds and must fit in an int64.
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_NS = 2**63 - 1


def parse_go_duration_ns(text: str) -> int:
    """Parse a Go duration into integer nanoseconds; ValueError on anything Go would reject."""
    if not isinstance(text, str):
        raise ValueError(f'expected a duration string like "30s", got {text!r}')
    body = text
    sign = 1
    if body[:1] in "+-" and body:
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return 0
    if not body:
        raise ValueError(f'invalid duration "{text}"')
    total = Fraction(0)
    pos = 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            if re.match(r"(\d+\.?\d*|\.\d+)", body[pos:]):
                raise ValueError(f'invalid duration "{text}": missing or unknown unit (ns, us, ms, s, m, h)')
            raise ValueError(f'invalid duration "{text}"')
        total += Fraction(match.group(1)) * _UNIT_NS[match.group(2)]
        pos = match.end()
    nanos = int(total)  # Go truncates sub-nanosecond fractions
    if nanos > _MAX_NS:
        raise ValueError(f'invalid duration "{text}": too large')
    return sign * nanos


def parse_go_duration(text: str) -> float:
    """Parse a Go duration into seconds (float)."""
    return parse_go_duration_ns(text) / 1e9


def format_go_duration(seconds: float) -> str:
    """Format seconds the way Go's Duration.String does: "1m30s", "5m0s", "500ms", "0s"."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _fraction_text(nanos, size) + unit
    hours, rest = divmod(nanos, _UNIT_NS["h"])
    minutes, rest = divmod(rest, _UNIT_NS["m"])
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + _fraction_text(rest, _UNIT_NS["s"]) + "s"


def _fraction_text(value: int, unit: int) -> str:
    """`value/unit` as a decimal without trailing zeros (exact: both are integers)."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration (kubectl's AGE): "45s", "5m30s", "3h", "2d4h", "1y30d";
    "0s" for a second of clock skew, "<invalid>" below that."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // (24 * 365)}y" if days == 0 else f"{hours // (24 * 365)}y{days}d"
    return f"{hours // (24 * 365)}y"
