"""Cron schedules (the five fields of a Kubernetes CronJob: minute, hour, day of month, month, day
of week; ``*``, lists, ranges and ``/`` steps; ``@hourly`` and friends), in UTC.

Small and pure: the operator needs the last fire time at or before now and the next one after it,
and no dependency for that."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final


class CronError(ValueError):
    """An expression that is not a cron schedule, saying which field is wrong."""


_FIELDS: Final = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 6))
_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: a schedule whose days never occur (30 February) is refused rather than searched for ever
_SEARCH_DAYS: Final = 366 * 5


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                a, b = body.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = int(body)
                end = high if step_text else start
        except ValueError:
            raise CronError(f"the {name} field {text!r} is not a number, range, list or */step") from None
        if name == "day of week" and end == 7:  # 7 is Sunday too
            end = 6 if start < 7 else 0
            values.add(0)
            start = min(start, 6)
        if step < 1 or not low <= start <= high or not low <= end <= high or start > end:
            raise CronError(f"the {name} field {text!r} is outside {low}-{high} (or a step below 1)")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        text = _MACROS.get(expression.strip(), expression.strip())
        parts = text.split()
        if len(parts) != 5:
            raise CronError(
                f"{expression!r} has {len(parts)} fields; a cron schedule has 5 "
                "(minute hour day-of-month month day-of-week), e.g. '0 * * * *'"
            )
        sets = [_field(p, *f) for p, f in zip(parts, _FIELDS, strict=True)]
        minutes, hours, days, months, weekdays = sets
        schedule = cls(
            expression, minutes, hours, days, months, weekdays, any_day=parts[2] == "*", any_weekday=parts[4] == "*"
        )
        schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC))  # fails for a date that never comes
        return schedule

    def _day_matches(self, t: datetime) -> bool:
        weekday = (t.weekday() + 1) % 7
        in_days, in_weekdays = t.day in self.days, weekday in self.weekdays
        # cron's rule: with both fields restricted, either may match
        if self.any_day or self.any_weekday:
            return in_days and in_weekdays
        return in_days or in_weekdays

    def next_after(self, t: datetime) -> datetime:
        """The first fire time strictly after ``t``."""
        t = t.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = t + timedelta(days=_SEARCH_DAYS)
        while t < limit:
            if t.month not in self.months or not self._day_matches(t):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0)
                continue
            if t.minute not in self.minutes:
                t += timedelta(minutes=1)
                continue
            return t
        raise CronError(f"{self.expression!r} never fires (no such date)")

    def last_at_or_before(self, t: datetime) -> datetime:
        """The latest fire time at or before ``t``."""
        t = t.astimezone(UTC).replace(second=0, microsecond=0)
        limit = t - timedelta(days=_SEARCH_DAYS)
        while t > limit:
            if t.month not in self.months or not self._day_matches(t):
                t = t.replace(hour=23, minute=59) - timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=59) - timedelta(hours=1)
                continue
            if t.minute not in self.minutes:
                t -= timedelta(minutes=1)
                continue
            return t
        raise CronError(f"{self.expression!r} never fired in {_SEARCH_DAYS} days before {t.isoformat()}")
