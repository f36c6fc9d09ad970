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
