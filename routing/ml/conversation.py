"""Routing a follow-up with the conversation it belongs to, for routers without a context path.

The question is routed alone first, and its in-scope score always reads it alone. When the router is
unsure (best probability below ``below``) it is routed again as ``unit(question + weight x
mean(earlier turns))``, kept to the experts the question alone makes plausible (``within_question``).
A request that sends its conversation's messages has no stored expert: the one its earlier questions
route to (``earlier_vector``) stands in, kept unless another beats it by ``STICKY_MARGIN``. The
defaults were chosen on doc2dial's validation split (docs/EVALUATIONS.md).
"""

from __future__ import annotations

import re

import numpy as np

# ``blend``'s weight (0 turns the rule off) and ``unsure``'s threshold.
CONTEXT_WEIGHT = 3.0
CONTEXT_BELOW = 0.6
# A conversation keeps its expert unless another expert's router score beats it by more than this
# (``serving.conversations.sticky_order``). Set by hand when conversations were built, not tuned on data.
STICKY_MARGIN = 0.15
# The conversation breaks a tie among the experts the question itself could mean, never moving it to one the question
# alone rules out: the largest floor that cost nothing on doc2dial's validation split.
PLAUSIBLE = 0.05
# A turn that opens as a reply ("Yes, it was cancelled.", "and could you help me ...") or points back at what was said
# ("Who should complete this?") does not change the subject, whatever the router makes of it alone; chosen on doc2dial's
# validation split (docs/EVALUATIONS.md).
_REPLY = re.compile(r"^\W*(?:yes|yeah|yep|yup|no|nope|ok|okay|sure|thanks|thank you|right|correct|exactly|alright|great|"
                    r"i see|and|so|but)\b", re.IGNORECASE)
_POINTS_BACK = re.compile(r"\b(?:it|its|this|that|these|those|they|them|their|he|she|him|her|his)\b", re.IGNORECASE)


# A turn that only thanks or says goodbye ("Thanks!", "ok thank you so much for the help", "bye") asks nothing: searched,
# it was answered with whatever sentence held "thanks" ("... won't expire thanks to a new law ...").
_THANKS = re.compile(r"^\W*(?:(?:ok(?:ay)?|great|perfect|cool|got it|alright|that'?s (?:all|it|great|helpful|perfect))[\s,.!]+)?"
                     r"(?:thanks|thank you|thank u|thx|many thanks|cheers)(?: (?:so|very) much)?"
                     r"(?: for (?:the|your|all the|all your) (?:help|information|info|answers?|time))?[\s.!]*$", re.IGNORECASE)
_GOODBYE = re.compile(r"^\W*(?:(?:ok(?:ay)?|thanks|thank you)[\s,.!]+)?(?:bye|goodbye|good bye|have a (?:good|nice|great) day)[\s.!]*$",
                      re.IGNORECASE)
THANKS_REPLY, GOODBYE_REPLY = "You're welcome.", "Goodbye."


def courtesy(question: str) -> str:
    """The polite reply to a turn that only thanks or says goodbye (``THANKS_REPLY``, ``GOODBYE_REPLY``); "" for any other."""
    return THANKS_REPLY if _THANKS.match(question) else GOODBYE_REPLY if _GOODBYE.match(question) else ""


def continues(question: str) -> bool:
    """Whether ``question`` opens as a reply or points back at what was said before (``_REPLY``, ``_POINTS_BACK``):
    it belongs to its conversation's subject."""
    return bool(_REPLY.match(question) or _POINTS_BACK.search(question))


def unsure(probs: np.ndarray, below: float) -> bool:
    """Whether the router's best probability for the question alone is under ``below``."""
    return bool(len(probs)) and float(np.max(probs)) < below


def within_question(blended: np.ndarray, alone: np.ndarray, floor: float = PLAUSIBLE) -> np.ndarray:
    """The conversation's probabilities ``blended`` kept to the experts whose probability for the question
    alone reaches ``floor``, rescaled to ``blended``'s total; ``alone`` where the conversation gives those none."""
    blended, alone = np.asarray(blended, dtype=np.float64), np.asarray(alone, dtype=np.float64)
    kept = np.where(alone >= floor, blended, 0.0)
    total = float(kept.sum())
    return kept * (float(blended.sum()) / total) if total > 0 else alone.copy()


def blend(vector: np.ndarray, turns: np.ndarray, weight: float) -> np.ndarray:
    """``unit(vector + weight x mean(turns))``: the question with its conversation (``turns`` (T, D), T >= 1)."""
    question = np.asarray(vector, dtype=np.float32)
    return _unit(question + float(weight) * np.asarray(turns, dtype=np.float32).mean(axis=0), otherwise=question)


def earlier_vector(turns: np.ndarray) -> np.ndarray:
    """``unit(mean(turns))``: what a conversation's earlier questions say together (``turns`` (T, D), T >= 1)."""
    mean = np.asarray(turns, dtype=np.float32).mean(axis=0)
    return _unit(mean, otherwise=mean)


def _unit(v: np.ndarray, otherwise: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else otherwise
