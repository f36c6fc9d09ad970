"""System checks of the experts' settings (``manage.py check``; ``migrate`` and ``run_platform`` run them)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def sentence_weights_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``EXTRACTIVE_SENTENCE_WEIGHTS`` must name known features with numbers (or be unset)."""
    from experts.ml.sentence_scorer import FEATURES, weight_vector

    weights = getattr(settings, "EXTRACTIVE_SENTENCE_WEIGHTS", None)
    if weights is None:
        return []
    if not isinstance(weights, dict) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in weights.values()):
        return [checks.Error("EXTRACTIVE_SENTENCE_WEIGHTS must be a JSON object of numbers, e.g. {\"cosine\": 1.8, \"overlap\": 0.8}",
                             hint=f"features: {', '.join(FEATURES)}", id="experts.E001")]
    try:
        weight_vector(weights)
    except ValueError as exc:
        return [checks.Error(f"EXTRACTIVE_SENTENCE_WEIGHTS: {exc}", id="experts.E002")]
    return []


@checks.register(checks.Tags.compatibility)
def sentence_scorer_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``EXTRACTIVE_SENTENCE_SCORER`` must be ``default``, ``linear`` or a readable scorer file (unused while weights are set)."""
    from experts.ml.sentence_scorer import load_scorer

    if getattr(settings, "EXTRACTIVE_SENTENCE_WEIGHTS", None) is not None:
        return []
    spec = getattr(settings, "EXTRACTIVE_SENTENCE_SCORER", "default")
    try:
        load_scorer(spec)
    except ValueError as exc:
        return [checks.Error(f"EXTRACTIVE_SENTENCE_SCORER={spec!r}: {exc}",
                             hint='use "default", "linear", or a file written by `manage.py evaluate sentences --save-scorer FILE`', id="experts.E004")]
    return []
