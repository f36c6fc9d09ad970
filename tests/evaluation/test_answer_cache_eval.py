"""The answer cache's threshold: chosen only where the wrong-intent share is under the bar with confidence."""

from __future__ import annotations

import numpy as np

from evaluation.answer_cache import _nearest, choose_threshold, reading


def test_a_threshold_is_chosen_only_when_the_wrong_share_is_safely_under_the_bar():
    rng = np.random.default_rng(0)
    best = rng.uniform(0.8, 1.0, 4000)
    right = ~((best < 0.9) & (rng.random(4000) < 0.2))  # wrong hits only below 0.9
    assert choose_threshold(best, right, max_wrong=0.01) == 0.9
    noisy = right & (rng.random(4000) > 0.02)  # 2% wrong everywhere: no threshold is safe
    assert choose_threshold(best, noisy, max_wrong=0.01) is None
    assert reading(best, right, 0.9)["wrong_hits"] == 0


def test_lookups_stay_within_the_questions_expert():
    cache = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    queries = np.array([[1.0, 0.0]], dtype=np.float32)
    best, where = _nearest(queries, cache, np.array(["ssa"], dtype=object), np.array(["dmv", "ssa"], dtype=object))
    assert (float(best[0]), int(where[0])) == (0.0, 1)  # the identical dmv question is another expert's cache
