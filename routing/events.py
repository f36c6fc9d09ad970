"""Recording routing events: one row per routed request.

``record(**fields)`` takes RoutingEvent field values. It writes synchronously for now; the serving
path only ever calls ``record``, so how events are written (batched, off the hot path) lives here.
"""

from __future__ import annotations

from typing import Any

from .models import RoutingEvent


def record(**fields: Any) -> None:
    """Store one routing event (field names as on ``RoutingEvent``)."""
    RoutingEvent.objects.create(**fields)


def flush() -> None:
    """Write any buffered events now (tests and shutdown call this)."""
