"""The console's navigation, as a template context processor.

Items are listed by URL name, each in a group (the groups let a template lay the nav out in sections
instead of one line of fourteen links). Every item's URL name must resolve: a wrong name raises
``NoReverseMatch`` on every console page (and fails tests/console/test_nav.py) instead of hiding the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse


class NavEntry(NamedTuple):
    label: str
    url_name: str
    current_prefixes: tuple[str, ...]  # URL-name prefixes that mark the item current
    staff_only: bool
    group: str


# The groups, in the order a grouped nav shows them.
NAV_GROUPS: tuple[str, ...] = ("Answers", "Experts", "Operations")

NAV_ITEMS: tuple[NavEntry, ...] = (
    NavEntry("Overview", "console-overview", ("console-overview",), False, "Answers"),
    NavEntry("Playground", "console-playground", ("console-playground",), False, "Answers"),
    NavEntry("Traces", "console-traces", ("console-trace",), False, "Answers"),
    NavEntry("Heatmap", "console-heatmap", ("console-heatmap",), False, "Answers"),
    NavEntry("Review", "console-review", ("console-review",), False, "Answers"),
    NavEntry("Training", "console-training", ("console-training",), False, "Experts"),
    NavEntry("Discovery", "labeling-runs", ("labeling-",), False, "Experts"),
    NavEntry("Knowledge", "knowledge-list", ("knowledge-", "console-expert"), False, "Experts"),
    NavEntry("Jobs", "console-jobs", ("console-job",), False, "Operations"),
    NavEntry("Experiments", "console-experiments", ("console-experiment",), False, "Experts"),
    NavEntry("Schedules", "console-schedules", ("console-schedule",), False, "Operations"),
    NavEntry("Alarms", "console-alarms", ("console-alarm",), False, "Operations"),
    NavEntry("API keys", "console-keys", ("console-key",), False, "Operations"),
    NavEntry("API docs", "api-docs", (), False, "Operations"),
    NavEntry("Teams", "console-teams", ("console-team",), True, "Operations"),
    NavEntry("Audit log", "console-audit", ("console-audit",), True, "Operations"),
    NavEntry("Admin", "admin:index", (), True, "Operations"),
)


@dataclass(frozen=True)
class NavItem:
    label: str
    url: str
    current: bool
    group: str = ""


@dataclass(frozen=True)
class NavGroup:
    label: str
    items: tuple[NavItem, ...]

    @property
    def current(self) -> bool:
        return any(item.current for item in self.items)


def optional_url(name: str, *args: Any) -> str:
    """The URL of ``name``, or an empty string when that page does not exist.

    For links to a page that may be absent; not used by the nav, whose every page must exist.
    """
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


def nav_items(request: HttpRequest) -> list[NavItem]:
    """The items the signed-in user sees, the current page's marked (in ``NAV_ITEMS`` order)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    match = getattr(request, "resolver_match", None)
    current = (match.url_name or "") if match else ""
    return [
        NavItem(entry.label, reverse(entry.url_name), any(current.startswith(p) for p in entry.current_prefixes), entry.group)
        for entry in NAV_ITEMS
        if user.is_staff or not entry.staff_only
    ]


def nav_groups(items: list[NavItem]) -> list[NavGroup]:
    """``items`` in their groups, in ``NAV_GROUPS`` order; a group with no item the user sees is left out."""
    unknown = {item.group for item in items} - set(NAV_GROUPS)
    if unknown:
        raise ValueError(f"nav items in a group missing from NAV_GROUPS: {sorted(unknown)}")
    groups = [NavGroup(label, tuple(item for item in items if item.group == label)) for label in NAV_GROUPS]
    return [group for group in groups if group.items]


def nav(request: HttpRequest) -> dict[str, Any]:
    """Context processor: ``nav_items`` (flat, for base.html) and the same items as ``nav_groups``."""
    items = nav_items(request)
    return {"nav_items": items, "nav_groups": nav_groups(items)}
