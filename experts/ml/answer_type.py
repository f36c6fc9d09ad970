"""What kind of fact a question asks for, and whether a sentence states one: the expected answer type of
question answering (a duration, an amount of money, an age, ...), for English questions.

"How long is the security code good for?" needs a sentence that says "within 10 minutes"; the sentence
scorer (``sentence_scorer``) reads similarity and shared words, and a sentence about the security code that
states no time at all often wins on both. ``expected`` reads the kind off the question's wording (None when
it asks for none of them: most questions); ``states`` says whether a sentence holds a fact of that kind.
The extractive answer (``extractive.extractive_answer``) adds the best-scored sentence that states it when
its best sentence does not. ``parts`` splits a question that asks two ("..., and how soon can I ...?"): serving
lets two experts answer where its parts belong to different ones (``serving.breadth.split_between``).
"""

from __future__ import annotations

import re

_NUMBER = r"(?:\d[\d,.]*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|sixty|ninety|a few|several)"
_TIME_UNIT = r"(?:minutes?|hours?|days?|weeks?|months?|years?|business days?|calendar days?)"
_MONTHS = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"

# (kind, what in a question asks for it), first match wins: the specific kinds before the general "how much".
_ASKS = (
    ("phone", re.compile(r"\b(?:what|which)(?: phone)? number\b.*\b(?:call|text|dial)\b|\bphone number\b|\bnumber (?:to|do i|should i|can i) call\b")),
    ("age", re.compile(r"\bhow old\b|\b(?:minimum|maximum|youngest|oldest|what|which|legal) age\b|\bage (?:limit|cutoff|cut-off|requirement|range)\b|\bthe youngest\b|\bthe oldest\b")),
    ("duration", re.compile(r"\bhow far (?:ahead|in advance|back)\b")),
    ("distance", re.compile(r"\bhow far\b|\bhow many (?:miles|kilometers)\b")),
    ("percent", re.compile(r"\bwhat (?:percent|percentage|share)\b|\bhow much of\b|\b(?:disability|percent) rating\b")),
    ("duration", re.compile(r"\bhow long\b|\bhow soon\b|\bhow many (?:minutes|hours|days|weeks|months|years)\b|\buntil when\b|\bby when\b|\bwhat(?:'s| is) the deadline\b")),
    ("money", re.compile(r"\bhow much\b.*\b(?:cost|costs|charge|charges|fee|fees|pay|paid|owe|price|money|worth|insurance|coverage|hold back|withhold|get)\b"
                         r"|\b(?:cost|charge|fee|price)s? (?:of|for|to)\b|\bwhat (?:does|do|will|would) (?:it|they|\w+) (?:charge|cost)\b|\bhourly (?:pay|rate|wage)\b")),
    ("count", re.compile(r"\bhow many\b|\bhow much\b")),
)

# What in a sentence states a fact of each kind.
_STATES = {
    "phone": re.compile(r"\b\d{3}\s*[-.)]?\s*\d{3}\s*[-.]\s*\d{4}\b|\b1\s*-\s*8\d\d\b|\bTTY\b", re.I),
    "age": re.compile(rf"\bages?\s+{_NUMBER}\b|\b{_NUMBER}\s+years?(?:\s+of\s+age|\s+old|\s+or\s+(?:older|younger))\b|\b(?:turns?|reach(?:es)?)\s+{_NUMBER}\b", re.I),
    "distance": re.compile(rf"\b{_NUMBER}\s*(?:miles?|kilomet(?:er|re)s?|km)\b", re.I),
    "percent": re.compile(rf"\b{_NUMBER}\s*(?:%|percent\b)", re.I),
    "duration": re.compile(rf"\b{_NUMBER}[\s-]+{_TIME_UNIT}\b|\buntil\s+(?:{_MONTHS}|\d)|\b(?:{_MONTHS})\s+\d{{1,2}}\s*,?\s*\d{{4}}\b", re.I),
    "money": re.compile(r"\$\s*\d|\b\d[\d,.]*\s*(?:dollars|cents)\b|\b(?:free of charge|no (?:additional |extra )?(?:cost|fee|charge))\b|\bminimum wage\b|\bfree\b", re.I),
    "count": re.compile(rf"\b{_NUMBER}\b|%|\$\s*\d", re.I),
}


# Where a question asks a second question: after a question mark, or at "and" before a question word
# ("Can I get VA disability, and how soon can I start Social Security retirement?").
_SECOND_QUESTION = re.compile(r"(?<=\?)\s+(?=[A-Z])|,?\s+and\s+(?=(?:what|when|how|where|who|why|which|can|could|do|does|did|is|are|will|would|should|must|may)\b)", re.I)


def parts(question: str) -> list[str]:
    """The questions ``question`` asks, in order: itself alone, or each of the two or more it joins."""
    found = [part.strip() for part in _SECOND_QUESTION.split(question) if part and part.strip()]
    return found if len(found) > 1 else [question]


def expected(question: str) -> str | None:
    """The kind of fact ``question`` asks for ("phone", "age", "distance", "percent", "duration", "money",
    "count"), or None when its wording asks for none of them."""
    text = question.lower().replace("\u2019", "'")
    for kind, asks in _ASKS:
        if asks.search(text):
            return kind
    return None


def states(kind: str, sentence: str) -> bool:
    """Whether ``sentence`` states a fact of ``kind`` (``expected``'s kinds)."""
    return bool(_STATES[kind].search(sentence))
