"""IntOrString scaling (apimachinery util/intstr GetScaledValueFromIntOrPercent) with its rounding.

Hand-written because the rounding must be upstream's exactly: an int is itself; "N%" of total is
ceil or floor of N*total/100 in integer arithmetic (math.Ceil/Floor of a float64 in Go, which for
these sizes is the same). A string that is not an integer percentage is an error naming the value.
"""

from __future__ import annotations

import re

_PERCENT = re.compile(r"^(\d+)%$")


class IntOrStringError(ValueError):
    pass


def scaled_value(value: int | str | None, total: int, round_up: bool, default: int | str = 0) -> int:
    if value is None:
        value = default
    if isinstance(value, bool):
        raise IntOrStringError(f"invalid value for IntOrString: invalid type: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if not m:
            raise IntOrStringError(
                f"invalid value for IntOrString: invalid type: string is not a percentage ({value!r})"
            )
        pct = int(m.group(1))
        num = pct * total
        return -(-num // 100) if round_up else num // 100
    raise IntOrStringError(f"invalid value for IntOrString: invalid type: {value!r}")


def is_percent(value: object) -> bool:
    return isinstance(value, str)
