"""An experiment's reading in a domain team's words: which version answers better, by how much, and how much longer.

Pure: it reads the decision dict of ``services.read`` (``stats.decide`` as JSON) and the plan. The
statistics stay on the page behind "details"; this is what the page says first.
"""

from __future__ import annotations

from typing import Any

OUTCOME_WORDS = {
    "promote": "B is better: you can promote it.",
    "keep_control": "Keep A: B is not better.",
    "no_difference": "No difference worth switching for.",
    "invalid_srm": "The traffic split is broken (the arms did not get their share): no decision can be trusted until it is fixed.",
    "continue": "Not decided yet: keep it running.",
}


def _percent(x: float) -> str:
    return f"{x * 100:+.0f}%"


def summary(decision: dict[str, Any], plan: dict[str, Any], metric: str = "questions answered well") -> dict[str, Any]:
    """``headline`` (a sentence), ``change`` (B against A, relative, with its interval, or None), ``needed``
    (rated answers still to collect per version to reach the plan) and ``verdict`` (what to do)."""
    primary = decision.get("primary") or {}
    control, treatment = primary.get("control") or {}, primary.get("treatment") or {}
    n_a, n_b = int(control.get("trials") or 0), int(treatment.get("trials") or 0)
    needed = max(0, int(plan.get("n_control") or 0) - n_a, int(plan.get("n_treatment") or 0) - n_b)
    verdict = OUTCOME_WORDS.get(str(decision.get("outcome")), str(decision.get("reason") or ""))
    rate_a, diff, ci = control.get("rate"), primary.get("difference"), primary.get("ci")
    if not n_a or not n_b or rate_a in (None, 0) or diff is None:
        return {"headline": f"No rated answers in both versions yet: it needs about {int(plan.get('n_control') or 0):,} in each.",
                "change": None, "needed": needed, "verdict": verdict}
    change = {"relative": diff / rate_a, "low": ci[0] / rate_a if ci else None, "high": ci[1] / rate_a if ci else None}
    direction = "more" if diff >= 0 else "fewer"
    interval = f" (somewhere between {_percent(change['low'])} and {_percent(change['high'])})" if ci else ""
    headline = f"B has {abs(change['relative']) * 100:.0f}% {direction} {metric} than A{interval}, from {n_a:,} and {n_b:,} rated answers."
    return {"headline": headline, "change": change, "needed": needed, "verdict": verdict}
