"""Text that may name any expert, shown to a user who may not see them all: router training logs and
diagnostics, the logs and results of platform-wide jobs (router training, scheduled checks).

Such text is written once for everyone, so it is not filtered row by row: ``redactor_for(user)``
replaces the slug and the name of every expert ``user`` may not see (``experts.access``) with
"another team's expert" wherever they stand as whole words. Staff, and a user who may see every
expert (a single-team install), get the text unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .access import visible_experts
from .models import Expert

HIDDEN_EXPERT = "another team's expert"


@dataclass(frozen=True)
class Redactor:
    """Replaces the ``hidden`` words (the hidden experts' slugs and names, lower-cased) where ``pattern`` finds them.

    ``pattern`` finds every expert's words, the visible ones too, longest first: a visible expert's name
    that holds a hidden one ("Motor Vehicles East" and "Motor Vehicles") is read whole and kept.
    """

    pattern: re.Pattern[str] | None = None
    hidden: frozenset[str] = frozenset()

    def _word(self, match: re.Match[str]) -> str:
        return HIDDEN_EXPERT if match.group(0).lower() in self.hidden else match.group(0)

    def __call__(self, value: Any) -> Any:
        """``value`` with every hidden expert's slug and name replaced: strings, and lists and dicts (keys too) of them."""
        if self.pattern is None:
            return value
        if isinstance(value, str):
            return self.pattern.sub(self._word, value)
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        return value


NOTHING_HIDDEN = Redactor()


def _hidden(user: Any) -> Any:
    return Expert.objects.exclude(pk__in=visible_experts(user).values("pk"))


def hidden_slugs(user: Any) -> frozenset[str]:
    """The slugs of the experts ``user`` may not see (none for staff); an expert since deleted is nobody's."""
    return frozenset(_hidden(user).values_list("slug", flat=True))


def redactor_for(user: Any) -> Redactor:
    """The redactor of the experts ``user`` may not see (none for staff); two queries."""
    hidden = {w.lower() for pair in _hidden(user).values_list("slug", "name") for w in pair if w}
    if not hidden:
        return NOTHING_HIDDEN
    shown = {w.lower() for pair in visible_experts(user).values_list("slug", "name") for w in pair if w} - hidden
    words = sorted(hidden | shown, key=len, reverse=True)
    # Whole words only: a slug inside another word or another slug ("dmv" in "dmv-east") stays.
    pattern = re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in words) + r")(?![\w-])", re.IGNORECASE)
    return Redactor(pattern, frozenset(hidden))
