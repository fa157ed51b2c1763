"""Camunda 7 cron cycles (Quartz syntax): the expression, its next firing time, and the cycle timer.

``0 0 9 * * ?`` (every day at 9:00) has six fields, seconds first, and an optional seventh, the
year: second, minute, hour, day of month, month, day of week (1 = Sunday ... 7 = Saturday, as in
Quartz), year. Each field takes ``*``, numbers, ``a-b`` ranges, ``a/b`` or ``*/b`` steps, lists
``a,b,c`` and names (``JAN``, ``MON-FRI``); day of month and day of week take ``?`` (no value), and
day of month ``L`` (its last day). Quartz's ``W``, ``#`` and day-of-week ``L`` are refused. Times
are UTC. A small evaluator of our own, not croniter: croniter counts days of the week from 0 =
Sunday and reads a day of month and a day of week given together as "either", where Quartz
numbers from 1 and refuses that combination; adapting it would be as long as this, and less exact.
"""
from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

from SpiffWorkflow.bpmn.specs.event_definitions.timer import CycleTimerEventDefinition

from bpmn.spiff_internals import end_cycle, event_value, set_event_value

_FIELDS = (("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31),
           ("month", 1, 12), ("day of week", 1, 7), ("year", 1970, 2199))
_NAMES = {4: {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
          5: {d: i + 1 for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}}
_SEARCH_DAYS = 366 * 8  # a schedule that matches no day within eight years matches none


class Cron:
    """A parsed Quartz cron expression; ``Cron.parse`` raises ValueError naming the field at fault."""

    def __init__(self, fields: list[frozenset[int] | None], last_day: bool):
        self.seconds, self.minutes, self.hours, self.days, self.months, self.weekdays, self.years = fields
        self.last_day = last_day  # day of month "L"

    @classmethod
    def parse(cls, text: str) -> Cron:
        parts = text.split()
        if len(parts) not in (6, 7):
            raise ValueError(f"a cron expression has 6 or 7 fields (second minute hour day-of-month month "
                             f"day-of-week [year]); this one has {len(parts)}")
        parts += ["*"] * (7 - len(parts))
        last_day = parts[3].upper() == "L"
        fields = [None if (index == 3 and last_day) else _field(parts[index], index) for index in range(7)]
        if fields[3] is not None and fields[5] is not None and parts[3] != "*" and parts[5] != "*":
            raise ValueError("give a day of month or a day of week, and '?' for the other (Quartz reads "
                             "both together as an error)")
        return cls(fields, last_day)

    def next_after(self, moment: datetime) -> datetime | None:
        """The first firing strictly after ``moment`` (UTC), or None if there is none."""
        moment = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        start = moment.replace(microsecond=0) + timedelta(seconds=1)
        day = start.date()
        for _ in range(_SEARCH_DAYS):
            if self._day_matches(day):
                hit = self._first_time(start.time() if day == start.date() else time(0))
                if hit is not None:
                    return datetime.combine(day, hit, tzinfo=timezone.utc)
            day += timedelta(days=1)
        return None

    def _day_matches(self, day: date) -> bool:
        if self.years is not None and day.year not in self.years:
            return False
        if self.months is not None and day.month not in self.months:
            return False
        if self.last_day and (day + timedelta(days=1)).month == day.month:
            return False
        if self.days is not None and day.day not in self.days:
            return False
        quartz_weekday = (day.weekday() + 1) % 7 + 1  # Monday is 0 in Python, 2 in Quartz
        return self.weekdays is None or quartz_weekday in self.weekdays

    def _first_time(self, earliest: time) -> time | None:
        for hour in _sorted(self.hours, 0, 23):
            if hour < earliest.hour:
                continue
            for minute in _sorted(self.minutes, 0, 59):
                if hour == earliest.hour and minute < earliest.minute:
                    continue
                for second in _sorted(self.seconds, 0, 59):
                    if (hour, minute) == (earliest.hour, earliest.minute) and second < earliest.second:
                        continue
                    return time(hour, minute, second)
        return None


def _sorted(values: frozenset[int] | None, low: int, high: int) -> list[int]:
    return sorted(values) if values is not None else list(range(low, high + 1))


def _field(text: str, index: int) -> frozenset[int] | None:
    """The values a field allows; None for "any" (``*`` or ``?``)."""
    name, low, high = _FIELDS[index]
    if text == "?" and index in (3, 5):
        return None
    if text == "*":
        return None
    if any(mark in text.upper() for mark in ("W", "#")) or (text.upper().endswith("L") and index != 3):
        raise ValueError(f"the {name} field '{text}' uses W, # or L, which Baton does not read")
    values: set[int] = set()
    for part in text.split(","):
        values |= _part(part, index, name, low, high)
    return frozenset(values)


def _part(part: str, index: int, name: str, low: int, high: int) -> set[int]:
    span, _, step_text = part.partition("/")
    step = _number(step_text, index, name, 1, high) if step_text else 1
    if span == "*":
        first, last = low, high
    elif "-" in span:
        first_text, _, last_text = span.partition("-")
        first, last = _number(first_text, index, name, low, high), _number(last_text, index, name, low, high)
        if first > last:
            raise ValueError(f"the {name} range '{span}' runs backwards")
    else:
        first = _number(span, index, name, low, high)
        last = high if step_text else first
    return set(range(first, last + 1, step))


def _number(text: str, index: int, name: str, low: int, high: int) -> int:
    value = _NAMES.get(index, {}).get(text.upper())
    if value is None:
        if not text.isdigit():
            raise ValueError(f"the {name} field has '{text}', which is not a number from {low} to {high}")
        value = int(text)
    if not low <= value <= high:
        raise ValueError(f"the {name} value {value} is outside {low} to {high}")
    return value


def cron_next_after(text: str, moment: datetime) -> datetime | None:
    """The first firing of cron ``text`` strictly after ``moment`` (UTC); for timer start schedules."""
    return Cron.parse(text).next_after(moment)


def looks_like_cron(text: str) -> bool:
    """Whether a timeCycle is written as cron (fields separated by spaces) rather than ISO 8601."""
    return len(text.split()) in (6, 7) and not text.upper().startswith("R")


class CronCycleDefinition(CycleTimerEventDefinition):
    """A timeCycle written as cron: fires at each matching time, for as long as its element waits.

    Its ``event_value`` keeps SpiffWorkflow's shape (``{'cycles', 'next', 'duration'}``, cycles -1:
    unbounded), so the engine reads the next due time from ``next`` as for an ISO cycle."""

    def cycle_complete(self, my_task):
        now = datetime.now(timezone.utc)
        value = event_value(my_task)
        if value is None:
            text = my_task.workflow.script_engine.evaluate(my_task, self.expression)
            first = Cron.parse(text).next_after(now)
            value = {"cycles": -1 if first else 0, "next": first.isoformat() if first else None,
                     "duration": 0, "cron": text}
        if value["cycles"] == 0:  # no time matches any more: the timer is done, as an ISO cycle would be
            end_cycle(my_task)
            return False
        ready = False
        if datetime.fromisoformat(value["next"]) < now:
            following = Cron.parse(value["cron"]).next_after(datetime.fromisoformat(value["next"]))
            value["next"] = following.isoformat() if following else None
            value["cycles"] = -1 if following else 0
            ready = True
        set_event_value(my_task, value)
        return ready
