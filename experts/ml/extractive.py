"""A grounded answer assembled from retrieved passages, with numbered citations, and no LLM.

Sentences are scored by ``experts.ml.sentence_scorer`` (their similarity to the question, the words
they share with it, where they stand in their passage and what comes before them, weighed as fitted
on answered questions); the best few, kept in the order they appear in their passage, form the
answer. When the best passage scores below ``min_score`` the answer says so instead of guessing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import answer_type
from .junk import looks_like_junk, looks_like_menu
from .lru import Lru
from .sentence_scorer import SentenceModel, compare_candidates, load_scorer, reasons, sentence_features

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n{2,}|\n(?=\s*(?:[-*•]|\d+\.)\s)")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on for and or is are be can i my me do does how what when where who why with it this that you your".split())

NOT_FOUND = "I could not find this in the knowledge base."


@dataclass
class Passage:
    """A retrieved passage as the generator sees it."""

    text: str
    title: str = ""
    url: str = ""
    score: float = 0.0
    expert: str = ""
    document_id: int | None = None
    chunk_id: str = ""
    source: str = ""  # what a reader calls the document: its title, else its file name or id
    # Reads the chunk's sentence vectors from index time (one row per ``split_sentences(text)``); called
    # only when the chunk is not cached yet. None (or a read giving None): the sentences are encoded here.
    sentence_vectors: Callable[[], np.ndarray | None] | None = field(default=None, repr=False, compare=False)
    # The sentence of this passage the extractive scorer rates best for the question, when the
    # language model's prompt names it (``prompting.render_passages``); empty otherwise.
    lead: str = ""

# Documents carry their own bracketed footnote numbers ("see the brochure [3]"): beside our citation
# markers they would read as citations of the wrong passage (the prompt and the extractive answer drop them).
FOOTNOTE = re.compile(r"\s*\[\s*\d{1,3}\s*\]")
# A section's heading opens its chunk (the chunker keeps titles), on a line of its own that ends without
# punctuation, and ``split_sentences`` keeps it with the sentence after it: "Recovered vehicles\nIf your
# vehicle is recovered, ...". The scorer reads the sentence with its heading (the heading is evidence of
# what the sentence is about); the answer quotes the sentence without it (docs/EVALUATIONS.md has the figures).
# A line that breaks a sentence ("... in your spouse's name if\nyou and your spouse ...") is no heading:
# the next line must start as a sentence does.
_HEADING = re.compile(r"\A[^\n]*[^\s.!?:;,][ \t]*\n+(?=[A-Z0-9\"'(])")
# A page's own controls, which its text extraction kept beside a heading ("Choosing a School\nshare link You have ...").
_PAGE_CONTROL = re.compile(r"(?im)^[ \t]*(?:share link|share this page|print this page|back to top)\b[ \t]*")


# A space before a comma, stop, colon or semicolon ("If your vehicle is recovered , make sure"): text
# extracted from HTML, tokenised and joined again, as doc2dial's pages are. Token F1 reads the same words.
_SPACED_PUNCTUATION = re.compile(r"(?<=\S) +([,.;:!?])(?=\s|$)")
# ... and a currency sign or a percent sign from its number ("$ 25 for a set of 2 plates", "a rating of at least 30 %").
_SPACED_SIGN = re.compile(r"(?<=\$) (?=\d)|(?<=\d) (?=%)")
# The same extraction splits hyphenated words and numbers apart ("non - driver", "VA Form 22 - 8691", "800 - 669 - 8477",
# "DIAL - IN", "service - connected"); the answer joins them again where the pieces show a compound: two numbers, two
# capitalised words, an English prefix before the hyphen, or two words of which the second opens no clause (of doc2dial's
# 1,396 "word - word", all but a few dozen are compounds: "service - connected" 95, "income - driven" 83, "full - time"
# 49). Elsewhere it is a dash between two clauses ("$ 17.50 - or less", "the fasteners - we supply none") and stays.
_SPACED_HYPHEN = re.compile(r"(?<=\d) - (?=\d)|(?<=[A-Z]{2}) - (?=[A-Z]{2})|(?<![\w-])((?i:pre|non|co|ex|re|self|anti|multi|semi|sub|post|mid|one|two|three|"
                            r"four|five|six|seven|eight|nine|ten|full|part|half|out|in|on|of|off|for|e)) - (?=\w)"
                            r"|(?<=[A-Za-z]) - (?=(?!(?i:a|also|an|and|but|for|he|i|if|it|or|please|see|she|that|the|these|they|this|those|to|we|"
                            r"which|who|you)\b)[A-Za-z])")


# The same extraction drops the apostrophe of a contraction or a possessive and leaves a space ("you re", "don t",
# "the service member s spouse"): a third of the answers to doc2dial's validation and the demo's questions read so.
# The answer puts it back where the pieces can only be one: "n t", a pronoun before re/ve/ll/d, "I m", and a word
# before a lone "s" (no English word is "s").
_SPLIT_CONTRACTION = re.compile(r"\b(?:(\w+n) (t)|((?i:you|we|they|who|what|that|there|it|he|she|i)) (re|ve|ll|d)|((?i:i)) (m)|([A-Za-z]{2,}) (s))\b"
                                r"(?=[\s,.;:!?)]|$)")


# A download link's label glued into the text around it ("Download VA Form 22-8691 PDF If you have any questions ..."):
# the page's link, not its prose. The sentence beside it stays; the form it names is named in the prose as well.
_DOWNLOAD_LABEL = re.compile(r"\bDownload\b[^.!?\n]{0,100}?\bPDF\b\s*")


# A link's title run into its description, no space between ("EligibilitySee if you're eligible ...", "About GI Bill
# benefitsLearn how the GI Bill works", "ChecklistIt will help"): the description opens with an imperative a page's links
# use, or with a word that opens prose (not "In": "LinkedIn"; not before an address: "ThankYou@ssa.gov"). The answer
# parts them with a colon (no sentence end, so ``junk.looks_like_junk`` still reads a run of such links as one).
_LINK_VERBS = ("Access|Apply|Ask|Browse|Call|Change|Check|Choose|Compare|Connect|Contact|Discover|Download|Estimate|Explore|File|Find|Get|Go|"
               "Learn|Manage|Order|Pay|Prepare|Print|Read|Request|Review|Schedule|Search|See|Send|Sign|Start|Submit|Tell|Track|Update|Upload|"
               "Use|View|Visit|Watch")
_GLUED_TITLE = re.compile(rf"(?<=[a-z]{{2}})(?=(?:{_LINK_VERBS}|If|It|The|This|We|When|You|Your)\b(?!@))")

# A section's or a link's label that opens the sentence, a space and no stop between ("Citizenship We can accept only
# certain documents ...", "Apply Online The easiest and quickest way ...", "Refill your prescriptions We may cover ..."): a
# capitalised word and up to five more before a word that opens prose, capitalised, and a lower-case word. The answer parts
# a section's label from it with a colon, as ``_GLUED_TITLE`` does, and drops a link's (one that opens with a link's verb,
# "Learn about the Yellow Ribbon Program", "Estimate Your Retirement Benefits": its link is not in the text). Not "In" ("Sign
# In to your account"), "A" or "An" ("Medicare Part A helps pay"). On doc2dial's and the demo's documents 86 sentences open so.
_LEADING_LABEL = re.compile(r"\A([A-Z][\w'/&-]*(?:\s+[\w'/&-]+){0,5}?)(?<=\w)\s+(?=(?:All|Each|For|If|It|Most|Our|Some|The|This|To|We|When|You|Your)\s+[a-z])")
_LINK_LABEL = re.compile(rf"(?:{_LINK_VERBS})\b")

# "Learn more about ..." is a link's label (its link is not in the text): up to its own stop, the end of the text, or
# the capitalised opener of the prose run into it ("Learn more about your VA health care coverage If you need help ...").
_LEARN_MORE = re.compile(r"\bLearn more\b[^.!?\n]*?(?:[.!?](?=\s|$)|\Z|\s+(?=(?:A|Also|An|Call|Find|For|Get|If|In|No|Note|Our|Please|The|These|"
                         r"This|To|We|When|Yes|You|Your)\b))")


# A sentence the page's text ran on without a capital after its stop ("Do not drive a vehicle that is not insured. you
# could be arrested"): the word after a stop that ends a lowercase word of three letters or more gets its capital, unless
# that word is an abbreviation that a sentence goes on after ("etc. and").
_LOWER_AFTER_STOP = re.compile(r"\b([a-z]{3,})\. ([a-z])")
_GOES_ON = frozenset({"etc", "approx", "incl", "dept", "govt", "misc", "vol", "est", "min", "max", "ext", "fig", "resp", "cont", "ref"})


def _capital(match: re.Match[str]) -> str:
    word, first = match.groups()
    return match.group() if word in _GOES_ON else f"{word}. {first.upper()}"


def _balanced(text: str) -> str:
    """``text`` without a closing parenthesis it never opened, nor one it opens and never closes: a sentence cut from a
    parenthesis that began or ends in the sentence beside it ("... born in 1960 or later.) If your full ...")."""
    drop, opened = set(), []
    for i, c in enumerate(text):
        if c == "(":
            opened.append(i)
        elif c == ")":
            if opened:
                opened.pop()
            else:
                drop.add(i)
    drop.update(opened)
    if not drop:
        return text
    return re.sub(r" {2,}", " ", "".join(c for i, c in enumerate(text) if i not in drop)).strip()


def _apostrophe(match: re.Match[str]) -> str:
    word, ending = next((match.group(i), match.group(i + 1)) for i in (1, 3, 5, 7) if match.group(i))
    return f"{word}'{ending}"


# Sentences whose quote a process keeps: an answer reads each candidate's quote several times (the junk check, the
# completion, the kind of fact, the text), eight substitutions of ~90 us each time, and chunks come back again and again.
# A memory bound (~10 MB at a few hundred characters a sentence), not a tuned figure.
QUOTE_CACHE_SIZE = 20000


@functools.lru_cache(maxsize=QUOTE_CACHE_SIZE)
def quoted(sentence: str) -> str:
    """What an answer quotes of a passage sentence: without the document's footnote markers, its section's
    heading line, a download or "learn more" link's label, a space before punctuation, around a hyphen, after "$" or before "%", or in place of a contraction's
    apostrophe, or a parenthesis it does not both open and close; and with a link's title parted from the description run into it, a section's
    label from the sentence it opens, and a capital after a stop the page left out."""
    text = _SPACED_HYPHEN.sub(r"\1-", _SPACED_PUNCTUATION.sub(r"\1", _balanced(_HEADING.sub("", _PAGE_CONTROL.sub("", FOOTNOTE.sub("", sentence)), count=1))))
    text = _SPACED_SIGN.sub("", text)
    text = _LEARN_MORE.sub("", _DOWNLOAD_LABEL.sub("", text))
    text = _LOWER_AFTER_STOP.sub(_capital, text)
    return _LEADING_LABEL.sub(_label, _GLUED_TITLE.sub(": ", _SPLIT_CONTRACTION.sub(_apostrophe, text)).strip(), count=1)


def _label(match: re.Match[str]) -> str:
    """A leading link's label, one that opens with a link's verb ("Learn about the Yellow Ribbon Program"), is dropped: its link
    is not in the text; any other label ("Citizenship", "Note", "Refill your prescriptions") is parted from the sentence by a colon."""
    return "" if _LINK_LABEL.match(match.group(1)) else f"{match.group(1)}: "


@dataclass
class Answer:
    """The generated answer and the passages it cites (1-based ``[n]`` markers in the text).

    ``finish_reason``: "stop" (the answer ended), "length" (cut at the token limit) or
    "time_budget" (a streamed model answer cut at its time budget).
    """

    text: str
    citations: list[Passage] = field(default_factory=list)
    grounded: bool = True
    finish_reason: str = "stop"
    # An extractive answer's choice (``extractive_answer``): the quoted sentences and the runner-up,
    # each as {"passage": its 1-based place among the passages given, "sentence": its 1-based place
    # in that passage, "score", "text"}, the quoted ones with the ``reasons`` they won.
    selection: dict[str, Any] | None = None


# A run-on "sentence" (a list or a run of link titles the page never punctuated) stays one sentence: cutting
# it at its likeliest break lost answer F1 (docs/EVALUATIONS.md); gold answers run across such lists as
# often as they pick one item. Its quote stops at the answer's bound (``bounded``).
def split_sentences(text: str) -> list[str]:
    parts: list[str] = []
    for part in (p.strip() for p in _SENTENCE_SPLIT.split(text) if p and p.strip()):
        if parts and _NO_END.search(parts[-1]) and not _LABEL.search(parts[-1]):
            parts[-1] = f"{parts[-1]} {part}"  # "William D." or "Oct." ended no sentence
        else:
            parts.append(part)
    return [p for p in parts if len(p) >= 20 or len(parts) == 1]


# A stop that ends no sentence: a middle initial after a name ("William D. Ford"), a month's abbreviation ("Oct. 1") or
# "U.S." (doc2dial's documents split 121 sentences there, "be a U.S. | Citizen", "the U.S. | Department of ..."), or "P.O." (16
# times in doc2dial's and the demo's documents, some run into the word before, "BureauP.O.": an answer opened "Box 2700-ESP
# Albany, NY 12220-0700 When you ..."); but a
# letter after a label word names a part ("Medicare Part B. If you ...") and does end one.
_NO_END = re.compile(r"(?:\b[A-Z][a-z]+ [A-Z]|\bU\.S|P\. ?O|\b(?:Jan|Feb|Mar|Apr|Aug|Sep|Sept|Oct|Nov|Dec))\.$")
_LABEL = re.compile(r"\b(?:Part|Section|Plan|Title|Form|Schedule|Chapter|Appendix|Step|Option|Tier|Class|Grade|Level|Phase|Type|Item|Question|Exhibit) [A-Z]\.$")


def word_set(text: str) -> set[str]:
    """The content words of ``text`` (lower-cased, stop words dropped): what the sentence scorer's overlap counts."""
    return {t for t in _WORD.findall(text.lower()) if t not in _STOP}


def never_quoted(text: str) -> bool:
    """Whether an answer never quotes this quote of a sentence: nothing (a download link's label alone), junk
    (``junk.looks_like_junk``), or a line that introduces what it does not hold ("These conditions apply to family members
    using transferred benefits:", a page template's empty field "show mydmv button in megamenu:"): its list, if any, is
    the next "sentence" of the passage. On doc2dial's validation split and the demo's questions, 5 of 501 answers
    quoted one; without them, validation recall 0.5304 -> 0.5303, the demo unchanged."""
    return not text or text.endswith(":") or looks_like_junk(text)


def set_aside_share(chunks: list[str]) -> float:
    """The share of ``chunks``' characters an answer never quotes: whole menus (``junk.looks_like_menu``) and, in the
    other chunks, the sentences that are link lists, tag clouds or run-together titles, or labels (``never_quoted``).
    What the console shows per document; 0.0 for no text."""
    total = aside = 0
    for chunk in chunks:
        total += len(chunk)
        if looks_like_menu(chunk):
            aside += len(chunk)
        else:
            aside += sum(len(sentence) for sentence in split_sentences(chunk) if never_quoted(quoted(sentence)))
    return round(aside / total, 4) if total else 0.0


@dataclass(frozen=True)
class _ChunkSentences:
    sentences: list[str]
    tokens: list[set[str]]
    vectors: np.ndarray  # (sentences, dim), read-only


# The first retrieved passages whose sentences the extractive answer reads, whole, and may cite (a language model
# is shown as many, ``prompting.SHOWN_PASSAGES``): set with the sentence scorer, which was fitted on the sentences
# of the top three passages of doc2dial's train questions (``sentence_scorer``, ``manage.py evaluate sentences``).
MAX_PASSAGES = 3
# The extractive answer's length: its best sentence, then the scorer's next best sentences of the passages it read
# (each once, any passage, no question) that still fit, while the answer stays within this many words (``complete``;
# a sentence longer than the whole answer is cut to it, ``bounded``; 0: the best sentence alone). Every answer within
# 60 words (issue 55); the rule, cutting and bound chosen on doc2dial's validation split by recall, through the
# product (tools/choose_answer_words.py: auto, 417 questions; figures: docs/CONFIGURATION.md).
ANSWER_WORDS = 60
# A completing piece shorter than this that ends without a stop is a link's or heading's label, not a sentence. On
# doc2dial's validation split it dropped such a label from 18 of 417 answers ("Retirement Estimator", "LEARN ABOUT
# ELIGIBILITY CRITERIA", "Health care Compensation payments") at recall -0.0010 (standard error 0.0005: the labels
# hold the reference's words now and then); 8 words cost -0.0021. Kept for what a person reads, not for the metric.
FRAGMENT_WORDS = 5
# A completing sentence whose content words are mostly those of a sentence already in the answer (Jaccard at least
# this) repeats it: pages restate a rule in two sections ("If you are not a US citizen, you must have DHS
# documentation ..." and "However, you must have DHS documentation ..."), and the answer quoted both. On doc2dial's
# validation split it changed 5 of 501 answers (with the demo's questions) and left recall level (0.5277 both); set
# for what a person reads, not tuned.
NEAR_DUPLICATE = 0.7
# The scorer's first sentences the reader (``experts.ml.reader``), when given, re-orders: the best size on doc2dial's
# validation split (``manage.py train_reader``, all train questions, gold-document candidates, int8; figures:
# docs/EVALUATIONS.md).
READER_SHORTLIST = 2
# Chunks whose sentences a process keeps (split, with their word sets and vectors). A memory bound, not a tuned
# figure: at ~5 sentences of 384 float32 numbers each, 5,000 chunks take ~40 MB.
CHUNK_CACHE_SIZE = 5000


class ChunkSentenceCache:
    """A bounded LRU of each chunk's sentences, their word sets and their vectors, by chunk id.

    A chunk is retrieved again and again; splitting it and encoding its sentences once per process
    instead of once per answer saves most of the generator's work. The key includes the text's
    length and hash, so a chunk re-indexed with other text is split and encoded again.
    """

    def __init__(self, size: int = CHUNK_CACHE_SIZE):
        self._items: Lru[tuple[str, int, int], _ChunkSentences] = Lru(size)

    @property
    def size(self) -> int:
        return self._items.size

    @property
    def hits(self) -> int:
        return self._items.hits

    @property
    def misses(self) -> int:
        return self._items.misses

    @staticmethod
    def key(passage: Passage) -> tuple[str, int, int] | None:
        return (passage.chunk_id, len(passage.text), hash(passage.text)) if passage.chunk_id else None

    def get(self, passage: Passage) -> _ChunkSentences | None:
        key = self.key(passage)
        return None if key is None else self._items.get(key)

    def put(self, passage: Passage, item: _ChunkSentences) -> None:
        key = self.key(passage)
        if key is not None:
            self._items.put(key, item)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def _passage_sentences(question: str, top: list[Passage], embed: Callable[[list[str]], np.ndarray],
                       cache: ChunkSentenceCache | None) -> tuple[np.ndarray, list[_ChunkSentences]] | None:
    """The question's vector and each passage's sentences, word sets and vectors (one encode for what
    is not cached); None when the passages hold no sentence at all (nothing is encoded then)."""
    found = [cache.get(p) if cache is not None else None for p in top]
    todo: list[tuple[int, list[str]]] = [(i, split_sentences(p.text)) for i, p in enumerate(top) if found[i] is None]
    if not any(sentences for _, sentences in todo) and not any(item.sentences for item in found if item is not None):
        return None
    # Sentence vectors from index time stand in for encoding, when they match the split (the text
    # did not change) and the question's encoder (same dimension); the rest are encoded with the question.
    given: dict[int, np.ndarray] = {}
    for i, sentences in todo:
        read = top[i].sentence_vectors
        block = read() if read is not None else None
        if block is not None and len(block) == len(sentences):
            given[i] = block
    to_encode = [(i, sentences) for i, sentences in todo if i not in given]
    texts = [question] + [sentence for _, sentences in to_encode for sentence in sentences]
    vectors = np.asarray(embed(texts), dtype=np.float32)
    q_vector, offset = vectors[0], 1
    dim = vectors.shape[1]
    blocks: dict[int, np.ndarray] = {}
    for i, sentences in to_encode:
        blocks[i] = np.array(vectors[offset : offset + len(sentences)], dtype=np.float32).reshape(len(sentences), dim)
        offset += len(sentences)
    for i, sentences in todo:
        block = blocks.get(i)
        if block is None:
            block = given[i]
            if block.shape[1] != dim:  # made by another encoder than the question's
                block = np.asarray(embed(sentences), dtype=np.float32).reshape(len(sentences), dim)
        block.setflags(write=False)
        item = _ChunkSentences(sentences=sentences, tokens=[word_set(s) for s in sentences], vectors=block)
        found[i] = item
        if cache is not None:
            cache.put(top[i], item)
    return q_vector, [item for item in found if item is not None]


def candidate_sentences(question: str, top: list[Passage], embed: Callable[[list[str]], np.ndarray],
                        cache: ChunkSentenceCache | None = None) -> tuple[list[tuple[int, int, str]], np.ndarray] | None:
    """The passages' sentences as (passage index, position, sentence) and their scorer features
    (``sentence_scorer.sentence_features``, one row each); None when the passages hold no sentence."""
    prepared = _passage_sentences(question, top, embed, cache)
    if prepared is None:
        return None
    q_vector, per_passage = prepared
    q_tokens = word_set(question)
    candidates = [(pi, si, sentence) for pi, item in enumerate(per_passage) for si, sentence in enumerate(item.sentences)]
    if not candidates:
        return None
    features = [sentence_features(q_tokens, item.sentences, item.tokens, item.vectors @ q_vector, passage_rank=pi) for pi, item in enumerate(per_passage)]
    return candidates, compare_candidates(np.concatenate(features))


@dataclass(frozen=True)
class RankedSentence:
    """One passage sentence as the scorer rates it for a question (``rank_sentences``)."""

    passage: int  # its passage's 1-based place among the passages given
    sentence: int  # its 1-based place in that passage (``split_sentences``)
    text: str  # as the passage has it (``quoted`` gives what an answer quotes)
    score: float
    row: int  # its row in the ranking's ``features``


@dataclass
class Ranking:
    """The sentences of a question's passages, best first, with the features they were scored on."""

    sentences: list[RankedSentence]
    features: np.ndarray
    model: SentenceModel

    def reasons(self, best: RankedSentence) -> list[str]:
        """Why ``best`` scored as it did (``sentence_scorer.reasons``)."""
        return reasons(self.features, best.row, self.model.local_weights(self.features, best.row))


def rank_sentences(question: str, passages: list[Passage], embed: Callable[[list[str]], np.ndarray], *, max_passages: int = MAX_PASSAGES,
                   cache: ChunkSentenceCache | None = None, scorer: SentenceModel | str | dict[str, Any] | None = None) -> Ranking | None:
    """Every sentence of the first ``max_passages`` passages (whole), best first by the sentence scorer; None
    when they hold no sentence. What the extractive answer quotes from, and the shortlist a language model
    judges with select decoding (``selection.plan_selection``)."""
    places = [i for i, p in enumerate(passages[:max_passages]) if p.text.strip()]
    found = candidate_sentences(question, [passages[i] for i in places], embed, cache) if places else None
    if found is None:
        return None
    candidates, features = found
    model = load_scorer(scorer)
    scores = model.score(features)
    ranked = np.argsort(scores)[::-1].tolist()
    sentences = [RankedSentence(places[candidates[i][0]] + 1, candidates[i][1] + 1, candidates[i][2], float(scores[i]), i) for i in ranked]
    return Ranking(sentences, features, model)


def complete(ranked: list[RankedSentence], max_words: int) -> list[RankedSentence]:
    """The sentences that complete the best one (``ranked[0]``): the next best by the scorer, none a question or a near
    repeat of one already chosen (``NEAR_DUPLICATE``), that still fit while the answer stays within ``max_words``.

    The fact a question needs is often not in the best-scored sentence but in one of the next few (the scorer's best
    of five holds more of the gold answer than its first pick); a sentence too long to fit is passed over for shorter ones,
    and a label of fewer than ``FRAGMENT_WORDS`` words that ends no sentence is passed over.
    """
    best = ranked[0]
    lead = quoted(best.text)
    words, said, out = len(lead.split()), [word_set(lead)], []
    for r in ranked[1:]:
        text = quoted(r.text)
        if not text or text.endswith("?") or words + len(text.split()) > max_words:
            continue  # a question (an FAQ's own, a heading's) answers nothing
        if len(text.split()) < FRAGMENT_WORDS and text[-1] not in ".!":
            continue  # a link's or a heading's label ("Find your proofs", "Retirement Estimator") completes nothing
        content = word_set(text)
        if any(len(content & s) >= NEAR_DUPLICATE * len(content | s) for s in said):
            continue  # the same sentence twice, or nearly, says nothing more
        said.append(content)
        out.append(r)
        words += len(text.split())
    return out


def bounded(sentence: str, max_words: int) -> str:
    """``sentence``, cut after its first ``max_words`` words and marked "..." where it runs past them: a list the page
    never punctuated reads as one "sentence" of up to 180 words. Against the best-matching run of that many words,
    or a cut at the last comma or semicolon within the bound, the first words held as much of doc2dial's validation
    answers or more (recall at 55 words 0.511 against 0.509; at 60, 0.521 against 0.520)."""
    words = sentence.split()
    return sentence if not max_words or len(words) <= max_words else " ".join(words[:max_words]) + " ..."


def stating_first(question: str, ranked: list[RankedSentence]) -> list[RankedSentence]:
    """``ranked`` with the best-scored sentence that states the kind of fact the question asks for (``answer_type``:
    "how long" needs a time, "how much" an amount) moved up right after the best one, when the best one states none,
    so the answer's completion (``complete``) takes it first.

    Chosen on doc2dial's validation split (the 14 of 417 questions whose wording asks for such a fact, through the
    product): recall 0.581 -> 0.626 against 0.586 with that sentence quoted first instead, and against either with
    the search limited to the scorer's first 3 or 5 sentences; on the train split's 67 such questions it is level
    (+0.002, standard error 0.009) and quoting it first loses 0.023 (figures: docs/EVALUATIONS.md).
    """
    kind = answer_type.expected(question)
    if not kind or not ranked or answer_type.states(kind, quoted(ranked[0].text)):
        return ranked
    stating = next((i for i, r in enumerate(ranked) if answer_type.states(kind, quoted(r.text))), None)
    return ranked if stating is None else [ranked[0], ranked[stating], *ranked[1:stating], *ranked[stating + 1:]]


def extractive_answer(
    question: str,
    passages: list[Passage],
    embed: Callable[[list[str]], np.ndarray],
    *,
    max_sentences: int = 1,
    max_words: int = 0,
    max_passages: int = MAX_PASSAGES,
    min_score: float = 0.25,
    cache: ChunkSentenceCache | None = None,
    scorer: SentenceModel | str | dict[str, Any] | None = None,
    reader: Callable[[str, list[str]], np.ndarray] | None = None,
) -> Answer:
    """Pick the sentences that best answer ``question`` from the top passages.

    Args:
        question: the user's question.
        passages: retrieved passages, best first; ``score`` is the retrieval similarity.
        embed: returns L2-normalised vectors for a list of texts.
        max_sentences: the best-scored sentences the answer quotes.
        max_words: complete the best sentence with the next best ones (``complete``) while the answer
            stays within this many words (``complete``; 0: the chosen sentences alone).
        max_passages: passages considered (and at most cited).
        min_score: below this best-passage similarity the answer is an honest "not found".
        cache: sentences and their vectors of chunks seen before, by chunk id (passages without a
            ``chunk_id`` are split and encoded every time).
        scorer: the sentence scorer, or a ``sentence_scorer.load_scorer`` spec (default: the shipped one).
        reader: scores (question, sentences), higher better (``reader.SentenceReader.score``): it re-orders the
            scorer's first ``READER_SHORTLIST`` sentences; None: the scorer's order.
    """
    passages = [p for p in passages if not looks_like_menu(p.text)]  # a menu is no answer, though each of its lines alone may pass
    top = [p for p in passages[:max_passages] if p.text.strip()]
    if not top or max(p.score for p in top) < min_score:
        return Answer(text=NOT_FOUND, citations=[], grounded=False)
    ranking = rank_sentences(question, passages, embed, max_passages=max_passages, cache=cache, scorer=scorer)
    if ranking is None:
        return Answer(text=NOT_FOUND, citations=[], grounded=False)
    ranked = [r for r in ranking.sentences if not never_quoted(quoted(r.text))]
    if not ranked:
        return Answer(text=NOT_FOUND, citations=[], grounded=False)
    if reader is not None and len(ranked) > 1:
        head = ranked[:READER_SHORTLIST]
        read = np.asarray(reader(question, [r.text for r in head]))
        ranked = [head[i] for i in np.argsort(-read, kind="stable")] + ranked[READER_SHORTLIST:]
    ranked = stating_first(question, ranked)
    # No sentence runs past the answer's bound: those longer are quoted up to it (``bounded``), the others stay as they are.
    cut = {r.row for r in ranked if len(quoted(r.text).split()) > max_words} if max_words else set()
    ranked = [replace(r, text=bounded(quoted(r.text), max_words)) if r.row in cut else r for r in ranked]
    added = complete(ranked, max_words) if max_words and max_sentences == 1 else []
    # The best sentence's passage first, then the others; in each, the sentences in the page's order (a "Yes." before its
    # detail), each passage cited once.
    lead = ranked[0].passage
    chosen = sorted([*ranked[:max_sentences], *added], key=lambda r: (r.passage != lead, r.passage, r.sentence))
    cited: list[int] = []
    pieces: list[tuple[int, list[str]]] = []  # (passage, its sentences quoted in a row): one citation mark each
    for r in chosen:
        if r.passage not in cited:
            cited.append(r.passage)
        if pieces and pieces[-1][0] == r.passage:
            pieces[-1][1].append(quoted(r.text))
        else:
            pieces.append((r.passage, [quoted(r.text)]))

    def where(r: RankedSentence) -> dict[str, Any]:
        return {"passage": r.passage, "sentence": r.sentence, "score": round(r.score, 3), "text": quoted(r.text)}

    selection = {
        "quoted": [{**where(r), "reasons": ranking.reasons(r)} for r in ranked[:max_sentences]],
        "runner_up": where(ranked[max_sentences]) if len(ranked) > max_sentences else None,
        "candidates": len(ranking.sentences),
        "read": min(len(ranked), READER_SHORTLIST) if reader is not None else 0,  # the scorer's first sentences the reader re-ordered
        "completed_with": len(added),  # the next best sentences that complete the best one (``complete``)
        "set_aside_as_junk": len(ranking.sentences) - len(ranked),
        "cut": any(r.row in cut for r in chosen),  # a quoted sentence stops at the bound, marked "..." (``bounded``)
    }
    text = " ".join(f"{' '.join(quotes)} [{cited.index(passage) + 1}]" for passage, quotes in pieces)
    return Answer(text=text, citations=[passages[i - 1] for i in cited], grounded=True, selection=selection)
