"""A small, pure cron matcher for disruption budget schedules (UTC only).

Karpenter parses ``Budget.schedule`` with ``robfig/cron/v3`` ``ParseStandard`` prefixed with
``TZ=UTC`` (``[core]:pkg/apis/v1/nodepool.go Budget.IsActive``). This module follows that parser:

* five fields ``minute hour day-of-month month day-of-week``; minute 0-59, hour 0-23,
  day-of-month 1-31, month 1-12 or ``JAN``-``DEC``, day-of-week 0-6 or ``SUN``-``SAT``
  (names case-insensitive; ``7`` is *not* Sunday in robfig/cron, so it is an error);
* each field is a comma list of ``*``, ``?``, ``N``, ``N-M``, each optionally ``/STEP``;
  ``N/STEP`` means ``N-max/STEP``;
* macros ``@yearly``/``@annually`` (``0 0 1 1 *``), ``@monthly`` (``0 0 1 * *``), ``@weekly``
  (``0 0 * * 0``), ``@daily``/``@midnight`` (``0 0 * * *``), ``@hourly`` (``0 * * * *``);
* day matching as robfig's ``dayMatches``: when day-of-month or day-of-week is a bare ``*``/``?``
  (no step > 1) both must match, otherwise either may match (Vixie cron's OR rule).

Times are epoch seconds (floats); a schedule fires at second 0 of each matching minute.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

__all__ = ["CronError", "CronSchedule", "last_hit", "parse_cron"]

_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS: Final = {
    m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))
}
_DAYS: Final = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_FIELDS: Final[tuple[tuple[str, int, int, dict[str, int]], ...]] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 6, _DAYS),
)
_UTC = dt.UTC


class CronError(ValueError):
    """A schedule robfig/cron would refuse; the message names the field and the bad part."""


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed five-field cron schedule: the allowed values of each field.

    ``dom_star``/``dow_star`` record a bare ``*``/``?`` in day-of-month/day-of-week, which
    switches day matching from OR to AND (robfig ``starBit``). Day-of-week uses 0 = Sunday.
    """

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_star: bool
    dow_star: bool

    def day_matches(self, day: dt.date) -> bool:
        """True when the schedule may fire on ``day`` (month, day-of-month and day-of-week rules)."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow


def _value(text: str, field: str, names: dict[str, int]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise CronError(f"{field}: {text!r} is not a number{' or a name' if names else ''}")
    return int(text)


def _part(part: str, field: str, low: int, high: int, names: dict[str, int]) -> tuple[set[int], bool]:
    """Values of one comma-separated part, and whether it is a star (robfig ``getRange``)."""
    range_text, slash, step_text = part.partition("/")
    star = range_text in ("*", "?")
    if star:
        start, end = low, high
    else:
        first, dash, last = range_text.partition("-")
        if "-" in last:
            raise CronError(f"{field}: too many hyphens in {part!r}")
        start = _value(first, field, names)
        end = _value(last, field, names) if dash else start
    step = 1
    if slash:
        if not step_text.isdigit():
            raise CronError(f"{field}: step {step_text!r} in {part!r} is not a number")
        step = int(step_text)
        if not star and "-" not in range_text:
            end = high  # "N/STEP" means "N-max/STEP"
        if step > 1:
            star = False
    if start < low or end > high:
        raise CronError(f"{field}: {part!r} is outside {low}-{high}")
    if start > end:
        raise CronError(f"{field}: {part!r} starts after it ends")
    if step == 0:
        raise CronError(f"{field}: step of zero in {part!r}")
    return set(range(start, end + 1, step)), star


def parse_cron(expr: str) -> CronSchedule:
    """Parse a budget schedule (five fields or an ``@`` macro) as robfig/cron ``ParseStandard`` does.

    Raises
    ------
    CronError
        For anything robfig/cron would refuse (wrong field count, out-of-range value, bad step,
        unknown macro, ``TZ=`` prefixes).
    """
    text = expr.strip()
    if text.startswith("@"):
        macro = _MACROS.get(text)
        if macro is None:
            raise CronError(f"unknown schedule macro {text!r} (expected one of {', '.join(sorted(_MACROS))})")
        text = macro
    fields = text.split()
    if len(fields) != 5:
        raise CronError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)} in {expr!r}"
        )
    parsed: list[frozenset[int]] = []
    stars: list[bool] = []
    for raw, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        values: set[int] = set()
        star = False
        for part in raw.split(","):
            if not part:
                raise CronError(f"{name}: empty list element in {raw!r}")
            got, is_star = _part(part, name, low, high, names)
            values |= got
            star = star or is_star
        parsed.append(frozenset(values))
        stars.append(star)
    return CronSchedule(
        minutes=parsed[0],
        hours=parsed[1],
        days_of_month=parsed[2],
        months=parsed[3],
        days_of_week=parsed[4],
        dom_star=stars[2],
        dow_star=stars[4],
    )


def last_hit(schedule: CronSchedule, *, at_or_before: float, after: float) -> float | None:
    """The most recent firing time ``t`` with ``after < t <= at_or_before`` (epoch seconds), or None.

    Walks days backwards from ``at_or_before`` to ``after`` (so the cost is proportional to the
    window in days, not minutes), and within a matching day hours and minutes backwards.
    """
    if at_or_before <= after:
        return None
    end = dt.datetime.fromtimestamp(at_or_before, tz=_UTC).replace(second=0, microsecond=0)
    lower = dt.datetime.fromtimestamp(after, tz=_UTC)
    hours = sorted(schedule.hours, reverse=True)
    minutes = sorted(schedule.minutes, reverse=True)
    day = end.date()
    while day >= lower.date():
        if schedule.day_matches(day):
            for hour in hours:
                if day == end.date() and hour > end.hour:
                    continue
                for minute in minutes:
                    candidate = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=_UTC)
                    if candidate > end:
                        continue
                    if candidate <= lower:
                        return None
                    return candidate.timestamp()
        day -= dt.timedelta(days=1)
    return None
