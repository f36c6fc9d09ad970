"""``{% load percent %}``: ``{{ share|percent|floatformat:1 }}`` shows a share (0.25) as a percentage (25.0)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def percent(share: float) -> float:
    return 100 * share
