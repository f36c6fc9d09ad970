"""Text that is not prose a person can read: link lists, navigation menus, tag clouds, run-together titles. Pure: no Django.

Web pages carry them beside their content, and a sentence splitter hands them over as "sentences": the
extractive answer never quotes one (``experts.ml.extractive``), and the evaluations count answers made
of them (``junk_rate``). Each rule is a shape a reader would call junk, never a score.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?](\s|$)")
_LINK = re.compile(r"https?://|www\.|\.(?:gov|com|org|html?)\b", re.IGNORECASE)
# A capitalised word straight after a lower-case one: a new title or menu item; not after a word that leads into a name
# ("at Camp Lejeune", "from August 1953", "in New York").
_RESTART = re.compile(r"\b(?!(?:a|about|after|against|and|an|as|at|before|between|by|during|for|from|in|into|of|on|or|per|since|than|the|"
                      r"through|to|under|until|via|with)\s)[a-z]+\s+[A-Z][a-z]")
# Items run into each other are junk only where they come this close, from the start: a menu restarts every few words
# ("Check your claim or appeal status View your payment history Upload evidence"), while a rule the page never punctuated
# opens with prose and then runs into the list it introduces ("To drive taxis ... you must be 18 years of age or older and
# ... one of these classes Class A ...", "You: Served at Camp Lejeune ... these presumptive conditions: Adult leukemia
# Aplastic anemia ... Bladder cancer Kidney cancer ..."). Counting any two restarts had set aside 72 of doc2dial's
# sentences, most of them such rules (the demo's "minimum age to drive a taxi" lost its answer), and counting them
# anywhere 19 more lists of conditions, documents and programs; a shape, not tuned (docs/EVALUATIONS.md).
_WORDS_PER_RESTART = 10
_MIN_WORDS = 9  # shorter runs without a full stop are headings or short answers ("Yes, if available"), not junk
# A passage of at least this many lines without one sentence end, and no line ending in ":" (which introduces a list),
# is a menu, link list or tile block: none of its lines is quoted, however well one matches. On doc2dial it flags none of
# the 854 gold passages, and 8 of its documents' 2,360 sections of 1,000 characters (footers, "Related Information" lists).
MENU_LINES = 4


def looks_like_junk(text: str) -> bool:
    """Whether ``text`` (citation markers removed) is junk rather than sentences.

    Junk when more than a third of its words are links; or when it is at least ``_MIN_WORDS`` words
    with no sentence end (no ``.``, ``?`` or ``!`` before a space or at the end) and either mostly
    capitalised words (run-together titles) or items running into each other from its first words on, at least
    once every ``_WORDS_PER_RESTART`` words ("Check your claim or appeal status View your payment history Upload
    evidence"); or when over half of four or more lines are one to four words (a menu).
    """
    body = text.strip()
    words = body.split()
    if not words:
        return False
    if sum(bool(_LINK.search(w)) for w in words) * 3 > len(words):
        return True
    if len(words) >= _MIN_WORDS and not _SENTENCE_END.search(body):
        capitalised = sum(w[:1].isupper() for w in words) / len(words)
        restarts = [m.start() for m in _RESTART.finditer(body)]
        items = len(restarts) >= 2 and len(restarts) * _WORDS_PER_RESTART >= len(words) and len(body[: restarts[0]].split()) < _WORDS_PER_RESTART
        if capitalised > 0.5 or items:
            return True
    lines = [line for line in body.splitlines() if line.strip()]
    return len(lines) >= 4 and sum(len(line.split()) <= 4 for line in lines) * 2 > len(lines)


def looks_like_menu(passage: str) -> bool:
    """Whether a whole passage is a menu: ``MENU_LINES`` lines or more, not one sentence end, no line introducing a list.

    Its lines, each a short title, pass ``looks_like_junk`` one by one; the passage they make does not.
    """
    lines = [line.strip() for line in passage.splitlines() if line.strip()]
    return len(lines) >= MENU_LINES and not _SENTENCE_END.search(passage.strip()) and not any(line.endswith(":") for line in lines)
