"""Retention of routing records: old routing events and expired conversations are deleted.

Run daily by the ``event_retention`` schedule (``routing.schedules.routines``). ``serving.events`` and
``serving.conversations`` write these rows on the request path and keep these functions under their old names there.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from .models import Conversation, RoutingEvent


def purge_old_events(days: int | None = None, batch_size: int | None = None) -> int:
    """Delete routing events older than ``days`` (default ROUTING_EVENT_RETENTION_DAYS), in batches.

    Batches of primary keys keep each DELETE short, so serving and the event writer are never
    blocked behind one huge transaction; a rerun continues where an interrupted one stopped.
    Returns the number of rows deleted.
    """
    days = settings.ROUTING_EVENT_RETENTION_DAYS if days is None else days
    batch_size = settings.ROUTING_EVENT_RETENTION_BATCH if batch_size is None else batch_size
    if days <= 0:
        raise ValueError("the retention must be at least one day")
    cutoff = timezone.now() - timedelta(days=days)
    deleted = 0
    while True:
        ids = list(RoutingEvent.objects.filter(created_at__lt=cutoff).order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        deleted += RoutingEvent.objects.filter(pk__in=ids).delete()[0]


def purge_expired_conversations(now: datetime | None = None) -> int:
    """Delete conversations past their expiry; returns how many (for a beat schedule)."""
    deleted, _ = Conversation.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted
