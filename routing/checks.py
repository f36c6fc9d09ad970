"""System checks of the routing settings (``manage.py check``; ``migrate`` and ``run_platform`` run them)."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core import checks

from routing.ml.conversation import DEFAULT_BELOW, DEFAULT_WEIGHT


@checks.register(checks.Tags.compatibility)
def conversation_routing_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``ROUTING_CONTEXT_WEIGHT`` must be a finite number >= 0 and ``ROUTING_CONTEXT_BELOW`` a finite number > 0."""
    errors = []
    weight = float(getattr(settings, "ROUTING_CONTEXT_WEIGHT", DEFAULT_WEIGHT))
    if not math.isfinite(weight) or weight < 0:
        errors.append(checks.Error(f"ROUTING_CONTEXT_WEIGHT is {weight}; it must be a number >= 0",
                                   hint=f"0 ranks every follow-up by the question alone; the default is {DEFAULT_WEIGHT:g}", id="routing.E001"))
    below = float(getattr(settings, "ROUTING_CONTEXT_BELOW", DEFAULT_BELOW))
    if not math.isfinite(below) or below <= 0:
        errors.append(checks.Error(f"ROUTING_CONTEXT_BELOW is {below}; it must be a number > 0",
                                   hint=f"a follow-up whose best expert's probability is under it is ranked with its conversation; above 1: every "
                                        f"follow-up; the default is {DEFAULT_BELOW:g}", id="routing.E002"))
    return errors
