"""Go-style durations ("30s", "1m30s", "1.5h", "500ms"), as the kubelet config writes them.

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
