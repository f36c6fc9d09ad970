"""System checks of the knowledge settings (``manage.py check``; ``migrate`` and ``run_platform`` run them)."""

from __future__ import annotations

import math
from typing import Any

from django.core import checks


@checks.register(checks.Tags.compatibility)
def context_weight_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``RETRIEVAL_CONTEXT_WEIGHT`` must be a finite number >= 0 (every follow-up's search reads it)."""
    from knowledge.services import context_weight

    weight = context_weight()
    if not math.isfinite(weight) or weight < 0:
        return [checks.Error(f"RETRIEVAL_CONTEXT_WEIGHT is {weight}; it must be a number >= 0",
                             hint="0 searches with the question alone; the default is 0.5", id="knowledge.E001")]
    return []


@checks.register(checks.Tags.compatibility)
def weight_power_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``RETRIEVAL_WEIGHT_POWER`` and ``RETRIEVAL_CONTEXT_WEIGHT_POWER`` must be finite numbers >= 0 (a negative
    power would favour the experts the router trusts least)."""
    from knowledge.services import weight_power

    errors = []
    for name, power in (("RETRIEVAL_WEIGHT_POWER", weight_power()), ("RETRIEVAL_CONTEXT_WEIGHT_POWER", weight_power(widened=True))):
        if not math.isfinite(power) or power < 0:
            errors.append(checks.Error(f"{name} is {power}; it must be a number >= 0",
                                       hint="1 trusts the router's probabilities as they are, 0 searches every expert alike", id="knowledge.E002"))
    return errors
