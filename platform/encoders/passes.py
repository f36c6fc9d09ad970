"""How the encoder child plans its forward passes: which waiting texts go together, from what a pass costs here."""

from __future__ import annotations

import time

from .base import Encoder


def next_pass(waiting: list[tuple[int, int, int, str]], size: int, pass_cost: float) -> list[tuple[int, int, int, str]]:
    """Take the texts of the next forward pass out of ``waiting`` (items ``(order, request, position, text)``).

    A pass costs about ``F + b x texts x longest text`` (every text is padded to the longest), so
    one long text in a pass of short ones costs as much as several passes. The waiting texts are
    sorted by length and split into runs of at most ``size`` that minimise ``pass_cost x passes +
    sum(texts x longest)`` (``pass_cost`` = F/b, in characters), by dynamic programming over the
    sorted list; the run holding the oldest text is the next pass, so nothing waits forever.
    """
    ranked = sorted(range(len(waiting)), key=lambda i: len(waiting[i][3]))
    lengths = [len(waiting[i][3]) for i in ranked]
    best, cut = [0.0] + [float("inf")] * len(ranked), [0] * (len(ranked) + 1)
    for end in range(1, len(ranked) + 1):
        for start in range(max(0, end - size), end):
            cost = best[start] + pass_cost + (end - start) * lengths[end - 1]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    oldest = min(range(len(ranked)), key=lambda k: waiting[ranked[k]][0])
    end = len(ranked)
    while cut[end] > oldest:
        end = cut[end]
    chosen = ranked[cut[end] : end]
    taken = [waiting[i] for i in chosen]
    gone = set(chosen)
    waiting[:] = [item for i, item in enumerate(waiting) if i not in gone]
    return taken


def measure_pass_cost(encoder: Encoder, repeats: int = 3) -> float:
    """F/b of ``next_pass`` for this encoder on this machine, in characters: timed on a few passes at start.

    From the fastest of ``repeats`` runs of one short text, eight short and eight long ones:
    ``b`` from the long minus the short, the per-text cost from eight minus one, ``F`` from the rest.
    """
    short = "how do I renew my licence"
    long = " ".join([short] * 6)

    def fastest(texts: list[str]) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            encoder.encode(texts, batch_size=len(texts))
            times.append(time.perf_counter() - t0)
        return min(times)

    fastest([short])  # warm-up
    one, eight_short, eight_long = fastest([short]), fastest([short] * 8), fastest([long] * 8)
    per_char = (eight_long - eight_short) / (8 * (len(long) - len(short)))
    if per_char <= 0:
        return 0.0
    per_text = (eight_short - one) / 7 - per_char * len(short)
    fixed = one - per_text - per_char * len(short)
    return float(min(10_000.0, max(0.0, fixed / per_char)))
