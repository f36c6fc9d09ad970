"""Routed search: each expert's collection weighted by the router's probability, widened when the router is unsure."""

from __future__ import annotations

# Every expert is always searched, those the router did not pick sharing its leftover probability
# (continuous soft routing): the routed search widens while the chosen experts' probabilities add up to
# less than this, and 1.0 is always. Not tuned: lowering it saves searches, never answers.
WIDEN_BELOW = 1.0
# Each weight is the router's probability to this power: the best hybrid nDCG@5 of the routed top-2 search
# on doc2dial's validation split (figures in docs/EVALUATIONS.md).
WEIGHT_POWER = 0.5
# The same power for a follow-up searched with its conversation's earlier turns: they already say what
# the conversation is about, and the router's weights lost answers there. The largest power within one
# standard error of the best routed extractive F1 on doc2dial's validation follow-ups: the router keeps the
# most say that costs nothing measurable (figures in docs/EVALUATIONS.md).
CONTEXT_WEIGHT_POWER = 0.25


def routing_weights(chosen: list[str], weights: list[float] | None, others: list[str], threshold: float,
                    power: float | None = None) -> dict[str, float]:
    """Collection weights for a routed search: the router's probabilities, widened when it is unsure, tempered.

    The chosen collections get their router probability. If those add up to less than
    ``threshold``, the router leaves real probability on the other experts, so they are searched
    too, sharing what is left; at the limit (a router that knows nothing) this is the flat search.
    Each weight is then raised to ``power`` (default ``WEIGHT_POWER``): below 1 a confident
    router's second expert keeps more of its say (0: the flat search; 1: the probabilities as
    they are). Without weights every chosen collection counts the same and nothing widens.
    """
    if weights is None:
        return dict.fromkeys(chosen, 1.0)
    out = {name: max(0.0, float(w)) for name, w in zip(chosen, weights, strict=True)}
    mass = sum(out.values())
    rest = [name for name in others if name not in out]
    if rest and mass < threshold:
        share = max(0.0, 1.0 - mass) / len(rest)
        out.update(dict.fromkeys(rest, share))
    if not any(w > 0 for w in out.values()):
        return dict.fromkeys(out, 1.0)
    power = WEIGHT_POWER if power is None else float(power)
    return {name: w**power if w > 0 else 0.0 for name, w in out.items()}
