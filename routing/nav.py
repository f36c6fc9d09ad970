"""The console's navigation, as a template context processor.

Items are listed by URL name. Pages other engineers are still building (API keys, experiments,
schedules, alarms) appear in the nav as soon as their URL names resolve: a name that does not resolve
yet (``NoReverseMatch``) is skipped silently, so the nav never breaks a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# (label, URL name, URL-name prefixes that mark the item current, staff only)
NAV_ITEMS: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("Overview", "console-overview", ("console-overview",), False),
    ("Playground", "console-playground", ("console-playground",), False),
    ("Heatmap", "console-heatmap", ("console-heatmap",), False),
    ("Review", "console-review", ("console-review",), False),
    ("Training", "console-training", ("console-training",), False),
    ("Discovery", "labeling-runs", ("labeling-",), False),
    ("Knowledge", "knowledge-list", ("knowledge-", "console-expert"), False),
    ("Jobs", "console-jobs", ("console-job",), False),
    ("Experiments", "console-experiments", ("console-experiment",), False),
    ("Schedules", "console-schedules", ("console-schedule",), False),
    ("Alarms", "console-alarms", ("console-alarm",), False),
    ("API keys", "console-keys", ("console-key",), False),
    ("API docs", "api-docs", (), False),
    ("Admin", "admin:index", (), True),
)


@dataclass(frozen=True)
class NavItem:
    label: str
    url: str
    current: bool


def optional_url(name: str, *args: Any) -> str:
    """The URL of ``name``, or an empty string when that page does not exist (yet)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


def nav_items(request: HttpRequest) -> list[NavItem]:
    """The items the signed-in user sees, the current page's marked."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    match = getattr(request, "resolver_match", None)
    current = (match.url_name or "") if match else ""
    items = []
    for label, name, prefixes, staff_only in NAV_ITEMS:
        if staff_only and not user.is_staff:
            continue
        url = optional_url(name)
        if url:
            items.append(NavItem(label, url, any(current.startswith(p) for p in prefixes)))
    return items


def nav(request: HttpRequest) -> dict[str, Any]:
    """Context processor: ``nav_items`` for base.html."""
    return {"nav_items": nav_items(request)}
