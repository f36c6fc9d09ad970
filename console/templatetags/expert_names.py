"""``{% load expert_names %}``: show a domain team its experts by name, not by slug.

``{{ slug|expert_name:expert_names }}`` gives the display name ("Veterans Affairs" for ``va``) of an
expert the signed-in user may see; ``expert_names`` is in every template's context
(``console.context_processors.expert_names``). Any other slug is shown as recorded: an expert of
another team keeps its name to that team, as every console page does, and an expert since deleted
has no name left.
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
