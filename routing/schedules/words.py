"""Schedules in words: "every Monday at 03:00" instead of five crontab fields. Pure (no Django).

Only the shapes the platform's schedules and a person's edits usually take are put in words (a
fixed minute and hour, on every day, one weekday or one day of the month; hourly at a minute);
anything else is spelled out field by field, never guessed.
"""

from __future__ import annotations

WEEKDAYS = {"0": "Sunday", "1": "Monday", "2": "Tuesday", "3": "Wednesday", "4": "Thursday", "5": "Friday", "6": "Saturday", "7": "Sunday"}
# Celery's own housekeeping, named as a person would.
BUILT_IN = {"celery.backend_cleanup": ("Clean up old task results", "Celery deletes task results past their expiry.")}


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def crontab_words(minute: str, hour: str, day_of_month: str, month_of_year: str, day_of_week: str) -> str:
    """The crontab in words (the server's time zone), e.g. "every day at 02:30"."""
    m, h, dom, moy, dow = (str(f).strip() for f in (minute, hour, day_of_month, month_of_year, day_of_week))
    if moy == "*" and m.isdigit():
        if h == "*" and dom == "*" and dow == "*":
            return f"every hour at {int(m):02d} minutes past"
        if h.isdigit():
            at = f"at {int(h):02d}:{int(m):02d}"
            if dom == "*" and dow == "*":
                return f"every day {at}"
            if dom == "*" and dow in WEEKDAYS:
                return f"every {WEEKDAYS[dow]} {at}"
            if dow == "*" and dom.isdigit():
                return f"on the {_ordinal(int(dom))} of every month {at}"
    return f"minute {m}, hour {h}, day of month {dom}, month {moy}, day of week {dow}"


def interval_words(every: int, period: str) -> str:
    """An interval schedule in words: 86400 seconds is "every day", not "every every 86400 seconds"."""
    seconds = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6}.get(period, 1) * every
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return f"every {int(seconds)} seconds"
