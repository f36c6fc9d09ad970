"""Raising, refreshing and acknowledging alarms, and the load check.

An alarm is raised by the check that noticed something: the schedules' routines (drift, uncovered
clusters, a router trained but not activated, load), an experiment's SRM check
(``routing.experiments.services.check_srm``). One open alarm per key: a check firing again refreshes
it in place.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from ..models import RoutingEvent
from .choices import AlarmKind, AlarmStatus
from .models import Alarm


def raise_alarm(kind: str, key: str, subject: str, message: str, proposal: str = "", details: dict[str, Any] | None = None,
                experts: list[str] | tuple[str, ...] = ()) -> Alarm:
    """Create an open alarm, or refresh the open one with the same key (one open alarm per key).

    ``experts``: the slugs of the experts it concerns, whatever its subject (an experiment's number, a
    router version), recorded on the row: who sees it (``routing.alarms.selectors.visible_alarms``). An alarm that
    names none is staff's only, unless it is about the router as a whole (``ROUTER_WIDE_ALARMS``).
    """
    concerned = sorted({s for s in experts if s})
    with transaction.atomic():
        alarm = Alarm.objects.select_for_update().filter(key=key, status=AlarmStatus.OPEN).first()
        if alarm is None:
            return Alarm.objects.create(kind=kind, key=key, subject=subject, message=message, proposal=proposal, details=details or {},
                                        experts=concerned)
        alarm.message, alarm.proposal, alarm.details, alarm.times_seen = message, proposal, details or {}, alarm.times_seen + 1
        alarm.experts = concerned
        alarm.save(update_fields=["message", "proposal", "details", "times_seen", "experts", "updated_at"])
        return alarm


def acknowledge(alarm: Alarm, user: Any = None) -> Alarm:
    """Mark the alarm seen; if the condition persists, the next check opens a new one."""
    Alarm.objects.filter(pk=alarm.pk, status=AlarmStatus.OPEN).update(
        status=AlarmStatus.ACKNOWLEDGED, acknowledged_at=timezone.now(), acknowledged_by=user if getattr(user, "pk", None) else None
    )
    alarm.refresh_from_db()
    return alarm


def check_load(window_days: int = 7, threshold: float | None = None, min_requests: int | None = None) -> list[Alarm]:
    """A load alarm for each expert answering more than ``threshold`` of the traffic over the window
    (once it holds ``min_requests`` answered requests, default ``LOAD_ALARM_MIN_REQUESTS``)."""
    threshold = float(settings.ROUTER_ALARM_SHARE if threshold is None else threshold)
    min_requests = int(settings.LOAD_ALARM_MIN_REQUESTS if min_requests is None else min_requests)
    since = timezone.now() - timedelta(days=window_days)
    rows = list(RoutingEvent.objects.filter(created_at__gte=since).exclude(expert="").values("expert").annotate(n=Count("id")))
    total = sum(r["n"] for r in rows)
    if total < min_requests:
        return []
    alarms = []
    for r in rows:
        share = r["n"] / total
        if share > threshold:
            alarms.append(raise_alarm(
                AlarmKind.LOAD, f"load:{r['expert']}", r["expert"],
                f"Expert {r['expert']} answered {share:.0%} of {total} requests over the last {window_days} days (threshold {threshold:.0%})",
                f"Split {r['expert']}: re-cluster its recent traffic (Discovery) to find sub-domains and promote them as experts; "
                "or add capacity (more workers / GPU replicas for its adapter) if the load is legitimate.",
                {"share": share, "requests": r["n"], "total": total, "window_days": window_days, "threshold": threshold},
                experts=[r["expert"]],
            ))
    return alarms
