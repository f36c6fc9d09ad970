"""The follow-up rule's two pieces: when the router is unsure, and the question blended with its conversation."""

from __future__ import annotations

import numpy as np
import pytest

from routing.ml.conversation import blend, unsure, within_question


def test_a_router_is_unsure_only_below_the_threshold():
    assert unsure(np.array([0.55, 0.45]), 0.6)
    assert not unsure(np.array([0.6, 0.4]), 0.6)
    assert not unsure(np.array([]), 0.6)


def test_the_blend_is_a_unit_vector_leaning_towards_the_conversation_by_its_weight():
    question, turns = np.array([1.0, 0.0, 0.0]), np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    mixed = blend(question, turns, 2.0)
    assert np.isclose(np.linalg.norm(mixed), 1.0)
    assert np.allclose(mixed, np.array([1.0, 1.0, 1.0]) / np.sqrt(3))  # the turns' mean, twice over, beside the question
    assert np.allclose(blend(question, turns, 0.0), question)
    assert np.allclose(blend(np.array([1.0, 0.0]), np.array([[-0.5, 0.0]]), 2.0), [1.0, 0.0])  # a zero mix keeps the question


def test_the_conversation_ranks_only_the_experts_the_question_alone_makes_plausible():
    alone = np.array([0.55, 0.44, 0.01])  # unsure between the first two, not the third
    blended = np.array([0.1, 0.2, 0.7])  # the conversation is about the third
    kept = within_question(blended, alone, floor=0.05)
    assert kept == pytest.approx([1 / 3, 2 / 3, 0.0])  # the conversation breaks the tie, within the question's own
    assert within_question(blended, alone, floor=0.0) == pytest.approx(blended)
    assert within_question(np.array([0.0, 0.0, 1.0]), alone, floor=0.05) == pytest.approx(alone)  # nothing left: the question alone
