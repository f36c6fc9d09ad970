"""``{% load expert_names %}``: ``{{ slug|expert_name:expert_names }}`` gives the name of an expert the user may see.

``expert_names`` is in every template's context (``console.context_processors``); any other slug (another
team's expert, a deleted one) is shown as recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from django import template

register = template.Library()


@register.filter
def expert_name(slug: object, names: Mapping[str, str] | None = None) -> str:
    """The name ``names`` gives ``slug``, else the slug itself; "" for none."""
    key = str(slug or "")
    if not key:
        return ""
    return names.get(key, key) if names else key
