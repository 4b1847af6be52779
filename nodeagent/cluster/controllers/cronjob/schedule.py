"""Cron schedules as Kubernetes parses them (robfig/cron v3 ParseStandard, SpecSchedule.Next).

Hand-written rather than croniter/cronsim: the accepted syntax and the errors must be robfig's
(five fields; `*`/`?`; ranges, steps, `N/step` meaning N-max; lists; JAN-DEC and SUN-SAT names,
case-insensitive; the @yearly/@annually/@monthly/@weekly/@daily/@midnight/@hourly macros and
@every <duration>; a TZ= or CRON_TZ= prefix), and so must day matching: when either day field was
written as `*` or `?` both must match, otherwise either may. Next() follows robfig's walk over
month, day, hour, minute in the schedule's zone (zoneinfo), so daylight-saving gaps and repeats
behave the same way (a wall time in a gap resolves as Go's time.Date does, to the later offset).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nodeagent.core.duration import parse_go_duration

STAR = 1 << 63
_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_FIELDS = ((0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _DAYS))
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class ScheduleError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Schedule:
    minute: int
    hour: int
    dom: int
    month: int
    dow: int
    zone: dt.tzinfo
    every: float | None = None  # @every: a constant delay

    def next(self, t: float) -> float | None:
        """The first activation strictly after epoch `t` (None: none within five years)."""
        if self.every is not None:
            return float(int(t)) + self.every
        cur = dt.datetime.fromtimestamp(int(t) + 1, self.zone)  # the upcoming whole second
        added = False
        year_limit = cur.year + 5
        while True:
            if cur.year > year_limit:
                return None
            wrapped = False
            while not (1 << cur.month) & self.month:
                if not added:
                    added = True
                    cur = _wall(cur.year, cur.month, 1, 0, 0, self.zone)
                cur = _add_months(cur, self.zone)
                if cur.month == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not self._day_matches(cur):
                if not added:
                    added = True
                    cur = _wall(cur.year, cur.month, cur.day, 0, 0, self.zone)
                cur = _add_days(cur, self.zone)
                if cur.hour != 0:  # midnight skipped or repeated by a DST change
                    cur = _abs(cur, (24 - cur.hour) * 3600 if cur.hour > 12 else -cur.hour * 3600, self.zone)
                if cur.day == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << cur.hour) & self.hour:
                if not added:
                    added = True
                    cur = _wall(cur.year, cur.month, cur.day, cur.hour, 0, self.zone)
                cur = _abs(cur, 3600, self.zone)
                if cur.hour == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << cur.minute) & self.minute:
                if not added:
                    added = True
                    cur = cur.replace(second=0)
                cur = _abs(cur, 60, self.zone)
                if cur.minute == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            if cur.second != 0:  # the standard parser's seconds field is 0: on to the next minute
                added = True
                cur = _abs(cur.replace(second=0), 60, self.zone)
                continue
            return cur.timestamp()

    def _day_matches(self, t: dt.datetime) -> bool:
        dom_match = bool((1 << t.day) & self.dom)
        dow_match = bool((1 << ((t.weekday() + 1) % 7)) & self.dow)
        if self.dom & STAR or self.dow & STAR:
            return dom_match and dow_match
        return dom_match or dow_match


def _wall(y: int, m: int, d: int, hh: int, mm: int, zone: dt.tzinfo) -> dt.datetime:
    """time.Date in `zone`: a wall time in a gap resolves to the later offset (as Go does)."""
    naive = dt.datetime(y, m, d, hh, mm)
    aware = naive.replace(tzinfo=zone, fold=0)
    return dt.datetime.fromtimestamp(aware.timestamp(), zone)


def _abs(t: dt.datetime, seconds: int, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(t.timestamp() + seconds, zone)


def _add_days(t: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    d = t.date() + dt.timedelta(days=1)
    return _wall(d.year, d.month, d.day, t.hour, t.minute, zone)


def _add_months(t: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    y, m = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return _wall(y, m, t.day, t.hour, t.minute, zone)


def _number(text: str, names: dict[str, int] | None, expr: str) -> int:
    if names and text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise ScheduleError(f"failed to parse int from {text}: strconv.Atoi: parsing {text!r}: invalid syntax")
    return int(text)


def _field(expr: str, lo: int, hi: int, names: dict[str, int] | None) -> int:
    bits = 0
    for part in expr.split(","):
        range_and_step = part.split("/")
        low_high = range_and_step[0].split("-")
        extra = 0
        if low_high[0] in ("*", "?"):
            start, end, extra = lo, hi, STAR
        else:
            start = _number(low_high[0], names, part)
            if len(low_high) == 1:
                end = start
            elif len(low_high) == 2:
                end = _number(low_high[1], names, part)
            else:
                raise ScheduleError(f"too many hyphens: {part}")
        if len(range_and_step) == 1:
            step = 1
        elif len(range_and_step) == 2:
            step = _number(range_and_step[1], None, part)
            if len(low_high) == 1:
                end = hi
            if step > 1:
                extra = 0
        else:
            raise ScheduleError(f"too many slashes: {part}")
        if start < lo:
            raise ScheduleError(f"beginning of range ({start}) below minimum ({lo}): {part}")
        if end > hi:
            raise ScheduleError(f"end of range ({end}) above maximum ({hi}): {part}")
        if start > end:
            raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {part}")
        if step == 0:
            raise ScheduleError(f"step of range should be a positive number: {part}")
        for i in range(start, end + 1, step):
            bits |= 1 << i
        bits |= extra
    return bits


def parse(spec: str, default_zone: str = "UTC") -> Schedule:
    """ParseStandard; ScheduleError with robfig's message on anything it rejects."""
    text = spec.strip()
    if not text:
        raise ScheduleError("empty spec string")
    zone_name = default_zone
    if text.startswith(("TZ=", "CRON_TZ=")):
        head, _, text = text.partition(" ")
        zone_name = head.split("=", 1)[1]
        text = text.strip()
    try:
        zone: dt.tzinfo = dt.UTC if zone_name in ("UTC", "") else ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ScheduleError(f"provided bad location {zone_name}: unknown time zone {zone_name}") from e
    if text.startswith("@"):
        if text.startswith("@every "):
            try:
                delay = parse_go_duration(text[len("@every ") :].strip())
            except ValueError as e:
                raise ScheduleError(f"failed to parse duration {text}: {e}") from e
            delay = max(1.0, float(int(delay)))
            return Schedule(0, 0, 0, 0, 0, zone, every=delay)
        if text not in _MACROS:
            raise ScheduleError(f"unrecognized descriptor: {text}")
        text = _MACROS[text]
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: {fields}")
    bits = [_field(f, lo, hi, names) for f, (lo, hi, names) in zip(fields, _FIELDS, strict=True)]
    return Schedule(bits[0], bits[1], bits[2], bits[3], bits[4], zone)
