"""``evaluate answers`` replays the product: the dataset loaded through its services, every question asked through its chat path.

The tiny two-domain dataset (tests/support/eval_datasets.py) is loaded into the test's database with the
real sentence encoder; the proof that nothing is re-implemented is that every answer the evaluation scored,
its citations and its expert equal what ``POST /v1/chat/completions`` returns for the same messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from evaluation.answers import AnswerConfig, evaluate_answers
from evaluation.workspace import FLAT, history
from tests.factories import make_key
from tests.support.eval_datasets import DOC2DIAL, write_answer_dataset

RECALL_FLOOR = 0.52  # today: 0.533 (auto, extractive, the default 120-question test sample; 0.539-0.548 before the answers left out link labels; docs/EVALUATIONS.md)
FULLY_ANSWERED_FLOOR = 0.40  # today: 0.452-0.464, demo/questions.jsonl through auto in the same workspace (target 0.7)


@pytest.fixture
def dataset(tmp_path, settings):
    settings.EXTRACTIVE_MIN_SCORE = 0.1
    write_answer_dataset(tmp_path)
    return tmp_path


def _chat(client, key: str, model: str, question: dict, messages: list | None = None) -> dict:
    messages = messages or [*history(question), {"role": "user", "content": question["text"]}]
    response = client.post("/v1/chat/completions", data=json.dumps({"model": model, "messages": messages}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    body = response.json()
    choices = body["switchboard"]["clarify"]
    if choices:  # asked which expert: the user replies with the question's own, as the evaluation does (workspace.ask)
        reply = next((c for c in choices if c["slug"] == question.get("domain")), choices[0])
        messages += [{"role": "assistant", "content": body["choices"][0]["message"]["content"]}, {"role": "user", "content": reply["name"]}]
        return _chat(client, key, model, question, messages)
    return body


@pytest.mark.django_db(transaction=True)
def test_every_scored_answer_is_what_the_chat_api_returns_for_the_same_messages(dataset, tmp_path, client):
    answers_file = tmp_path / "answers.jsonl"
    config = AnswerConfig(limit=None, generators=("extractive",), modes=("flat", "auto", "oracle"), answers_path=str(answers_file))

    report = evaluate_answers(dataset, config, say=lambda line: None)

    assert report["pipeline"] == "product"
    assert report["n_questions"] == 16
    for mode in ("flat", "auto", "oracle"):
        figures = report["results"][mode]["extractive"]
        for key in ("f1", "rouge_l", "recall", "words", "junk_rate", "abstained", "citation_precision", "expert_is_gold", "p50_ms"):
            assert key in figures
        assert figures["n"] == 16
    assert report["results"]["oracle"]["extractive"]["expert_is_gold"] == 1.0
    assert report["results"]["oracle"]["extractive"]["recall"] > 0.6  # the gold expert's documents hold every answer, and the answer holds most of it
    assert set(report["paired"]) == {"auto/extractive - flat/extractive", "auto/extractive - oracle/extractive"}

    rows = [json.loads(line) for line in answers_file.read_text().splitlines()]
    questions = {q["query_id"]: q for q in map(json.loads, (dataset / "queries.jsonl").read_text().splitlines())}
    from experts.models import Expert
    from knowledge.models import Document

    # As a team asks: a key scoped to the team's own experts (the flat arm's expert is no team's), and one to the flat arm's.
    team = list(Expert.objects.exclude(slug=FLAT).values_list("slug", flat=True))
    keys = {"team": make_key("team", scopes=team).secret, "flat": make_key("flat", scopes=[FLAT]).secret}
    external = dict(Document.objects.values_list("pk", "external_id"))
    checked = 0
    for row in rows:
        mode = row["arm"].split("/")[0]
        question = questions[row["query_id"]]
        model = {"auto": "auto", "flat": FLAT}.get(mode, row["gold_expert"])
        body = _chat(client, keys["flat" if mode == "flat" else "team"], model, question)
        assert body["choices"][0]["message"]["content"] == row["answer"], (mode, question["text"])
        assert body["switchboard"]["expert"] == row["expert"]
        cited = [external.get(c.get("document_id"), "") for c in body["switchboard"]["citations"]]
        assert cited == row["cited_documents"]
        checked += 1
    assert checked == 48


@pytest.mark.django_db(transaction=True)
def test_a_question_file_is_scored_by_its_key_facts(dataset, tmp_path):
    facts = tmp_path / "questions.jsonl"
    facts.write_text(json.dumps({"question": "How much does renewing a driving licence cost?", "facts": ["64 dollars"], "domain": "cars"}) + "\n"
                     + json.dumps({"question": "When do pension payments start?", "facts": ["age 62", "three months before"]}) + "\n"
                     + json.dumps({"question": "Will it rain in Paris tomorrow?", "facts": ["not covered"], "kind": "out_of_scope"}) + "\n")
    config = AnswerConfig(limit=4, generators=("extractive",), modes=("auto", "oracle"), questions_path=str(facts))

    report = evaluate_answers(dataset, config, say=lambda line: None)

    auto = report["results"]["auto"]["extractive"]["questions"]
    assert auto["n"] == 3
    assert 0.0 <= auto["fully_answered"] <= 1.0
    assert 0.0 <= auto["facts_held"] <= 1.0
    assert set(auto["fully_answered_by_kind"]) == {"out_of_scope"}  # only one row names its kind
    assert "questions" not in report["results"]["oracle"]["extractive"]  # one row names no expert: no oracle for it


@pytest.mark.django_db(transaction=True)
def test_a_set_without_reference_answers_is_scored_on_what_needs_none(dataset):
    rows = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    (dataset / "queries.jsonl").write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "answer"}) for r in rows) + "\n")

    report = evaluate_answers(dataset, AnswerConfig(limit=None, generators=("extractive",), modes=("auto",)), say=lambda line: None)

    auto = report["results"]["auto"]["extractive"]
    assert report["n_questions"] == 16
    assert report["setup"]["reference_answers"] == 0
    assert auto["f1"] is None
    assert auto["recall"] is None
    assert auto["words"] > 0
    assert auto["junk_rate"] == 0.0
    assert auto["expert_is_gold"] is not None


def test_called_from_code_without_in_place_it_says_how(dataset):
    with pytest.raises(CommandError, match="--in-place"):
        call_command("evaluate", "answers", "--dataset", str(dataset))


def test_a_question_file_without_facts_is_refused(dataset, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "what?"}) + "\n")
    with pytest.raises(CommandError, match="facts"):
        call_command("evaluate", "answers", "--dataset", str(dataset), "--in-place", "--questions", str(bad), "--generators", "extractive")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_the_replayed_answers_hold_their_floors():
    """Floors a little under today's replayed figures (docs/EVALUATIONS.md, the default 120-question test sample, extractive):
    auto recall at least RECALL_FLOOR at a median under 60 words, no junk, every arm within noise of the others. The targets not met
    yet (recall 1.3x the one-sentence answer's, the demo question set fully answered 0.7) are reported, not asserted."""
    demo_questions = Path(__file__).resolve().parents[2] / "demo" / "questions.jsonl"
    config = AnswerConfig(generators=("extractive",), questions_path=str(demo_questions))

    report = evaluate_answers(DOC2DIAL, config, say=print)

    auto = report["results"]["auto"]["extractive"]
    assert auto["recall"] >= RECALL_FLOOR
    assert auto["words"] <= 60
    assert auto["junk_rate"] == 0.0
    assert auto["expert_is_gold"] >= 0.85
    for arm in ("flat", "oracle"):
        assert abs(report["results"][arm]["extractive"]["recall"] - auto["recall"]) < 0.05, arm
    print("demo questions fully answered:", auto["questions"]["fully_answered"])
    assert auto["questions"]["fully_answered"] >= FULLY_ANSWERED_FLOOR
