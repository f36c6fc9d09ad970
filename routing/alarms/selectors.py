"""Reads of the alarms page and the overview: the alarms a user may see."""

from __future__ import annotations

import re

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from .choices import ROUTER_WIDE_ALARMS
from .models import Alarm


def visible_alarms(visible: set[str] | None = None) -> QuerySet[Alarm]:
    """The alarms shown to a user who may see the experts ``visible`` (``None``: staff, every alarm).

    A user sees an alarm when one of the experts recorded on it (``Alarm.experts``) is one they may
    see. A router-wide alarm (``ROUTER_WIDE_ALARMS``) naming no expert carries no team's data, so every
    signed-in user sees it; any other alarm naming no expert is staff's only.
    """
    alarms = Alarm.objects.all()
    if visible is None:
        return alarms
    router_wide = Q(kind__in=sorted(ROUTER_WIDE_ALARMS), experts=[])
    if not visible:
        return alarms.filter(router_wide)
    # A JSON list of slugs, matched as text: each slug is a quoted string in it (slugs hold no quotes).
    names_one = Q(experts_text__regex='"(' + "|".join(re.escape(s) for s in sorted(visible)) + ')"')
    return alarms.alias(experts_text=Cast("experts", TextField())).filter(router_wide | names_one)

