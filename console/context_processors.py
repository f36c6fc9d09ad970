"""Template context every console page gets (see ``TEMPLATES`` in the settings)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from experts.access import visible_names


def expert_names(request: HttpRequest) -> dict[str, Any]:
    """``expert_names``: the display name of each expert the user may see, by slug, read only when a page uses it."""
    return {"expert_names": SimpleLazyObject(lambda: visible_names(getattr(request, "user", None)))}
