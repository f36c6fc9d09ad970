"""The demo's realistic question set (``demo/questions.jsonl``) stays well formed and grounded in the demo's documents.

Every line parses; every kind is known and the mix holds; facts are short phrases copied from the
documents each question names as its source (so a change to the documents that drops a fact shows
here); out-of-scope questions carry ``["not covered"]`` and no domain; two-expert questions draw
facts from two experts; ambiguous ones list their choices; follow-ups carry their earlier turns.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "demo"
KINDS = {"single", "two_sentences", "two_experts", "ambiguous", "out_of_scope", "misspelt", "follow_up"}
MINIMUM = {"single": 30, "two_sentences": 10, "two_experts": 6, "ambiguous": 5, "out_of_scope": 5, "misspelt": 5, "follow_up": 6}


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


@pytest.fixture(scope="module")
def documents() -> dict[str, tuple[str, str]]:
    agencies = json.loads((DEMO / "agencies.json").read_text())
    found: dict[str, tuple[str, str]] = {}
    for slug in agencies:
        for line in (DEMO / "documents" / f"{slug}.jsonl").read_text().splitlines():
            row = json.loads(line)
            found[row["id"]] = (slug, row["text"])
    return found


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    lines = (DEMO / "questions.jsonl").read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:  # pragma: no cover - the message is the point
            pytest.fail(f"questions.jsonl line {number} does not parse: {error}")
    return rows


def _sources(row: dict) -> list[str]:
    source = row["source"]
    return source if isinstance(source, list) else [source]


def test_kinds_and_size(questions):
    kinds = Counter(row.get("kind") for row in questions)
    assert set(kinds) <= KINDS, set(kinds) - KINDS
    assert len(questions) >= 80
    for kind, least in MINIMUM.items():
        assert kinds[kind] >= least, (kind, kinds[kind])
    texts = [_normal(row["question"]) for row in questions]
    assert len(texts) == len(set(texts)), "a question is repeated"


def test_facts_are_short_phrases(questions):
    for row in questions:
        facts = row["facts"]
        assert isinstance(facts, list), row["question"]
        assert 1 <= len(facts) <= 3, row["question"]
        for fact in facts:
            assert isinstance(fact, str), (row["question"], fact)
            assert 1 <= len(fact.split()) <= 6, (row["question"], fact)


def test_out_of_scope_has_no_domain(questions):
    for row in questions:
        if row["kind"] == "out_of_scope":
            assert row["facts"] == ["not covered"], row["question"]
            assert "domain" not in row, row["question"]


def test_facts_come_from_the_named_documents(documents, questions):
    for row in questions:
        if row["kind"] == "out_of_scope":
            continue
        sources = _sources(row)
        for source in sources:
            assert source in documents, (row["question"], source)
        texts = [documents[source][1] for source in sources]
        for fact in row["facts"]:
            assert any(_words(fact) <= _words(text) for text in texts), (row["question"], fact)
            assert any(_normal(fact) in _normal(text) for text in texts), (row["question"], fact)


def test_domains_choices_and_context(documents, questions):
    for row in questions:
        kind = row["kind"]
        if kind == "out_of_scope":
            continue
        experts = [documents[source][0] for source in _sources(row)]
        if kind == "two_experts":
            assert "domain" not in row, row["question"]
            assert len(set(experts)) == 2, row["question"]
            facts_from = {documents[s][0] for s in _sources(row) for f in row["facts"] if _normal(f) in _normal(documents[s][1])}
            assert len(facts_from) == 2, row["question"]
        elif kind == "ambiguous":
            assert "domain" not in row, row["question"]
            choices = row["choices"]
            assert len(choices) >= 2, row["question"]
            assert len(set(choices)) == len(choices), row["question"]
            assert set(choices) <= {slug for slug, _ in documents.values()}, row["question"]
            assert set(experts) <= set(choices), row["question"]
        else:
            assert row["domain"] == experts[0], row["question"]
            assert len(set(experts)) == 1, row["question"]
        if kind == "follow_up":
            context = row["context"]
            assert 1 <= len(context) <= 2, row["question"]
            assert all(turn["speaker"] == "user" and turn["text"].strip() for turn in context), row["question"]
        else:
            assert "context" not in row, row["question"]
