"""The project's URL routes and API operations, read from the resolver and the OpenAPI schema, for the tests that
check every URL and endpoint is covered (not a test module)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from django.urls import URLPattern, URLResolver, get_resolver


def _walk(patterns, prefix: str = "") -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.name or ""


def url_patterns() -> list[tuple[str, str]]:
    """(route, name) of every URL pattern but the admin's and static files'."""
    return [(route, name) for route, name in _walk(get_resolver().url_patterns)
            if not route.startswith(("admin/", "static/", "^static", "media/"))]


def api_operations() -> list[tuple[str, str]]:
    """(path, method) of every operation in the OpenAPI schema."""
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(path, method) for path, operations in paths.items() for method in operations]


def route_shape(route_or_path: str) -> str:
    """A route (``api/v1/jobs/<int:pk>``) or a schema path (``/api/v1/jobs/{id}``) with its parameters blanked."""
    return "/" + re.sub(r"<[^>]+>|\{[^}]+\}", "{}", route_or_path).lstrip("/")
