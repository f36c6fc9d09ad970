"""System checks of the experts' settings (``manage.py check``; ``migrate`` and ``run_platform`` run them)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def sentence_scorer_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``EXTRACTIVE_SENTENCE_SCORER`` must be ``default`` or a readable scorer file."""
    from experts.ml.sentence_scorer import load_scorer

    spec = settings.EXTRACTIVE_SENTENCE_SCORER
    try:
        load_scorer(spec)
    except ValueError as exc:
        return [checks.Error(f"EXTRACTIVE_SENTENCE_SCORER={spec!r}: {exc}",
                             hint='use "default" or a file written by `manage.py evaluate sentences --save-scorer FILE`', id="experts.E004")]
    return []
