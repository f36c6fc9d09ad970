"""``evaluate retrieval``: what the chat path retrieves, flat vs oracle vs routed, replayed through the product.

The fast test loads the tiny two-domain dataset (tests/support/eval_datasets.py) into the test's database with
the real sentence encoder; the slow one replays doc2dial and holds today's figures as regression floors.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command

from evaluation.retrieval import evaluate_retrieval, ndcg_at_k, recall_at_k
from tests.support.eval_datasets import DOC2DIAL, write_answer_dataset


def test_metrics_count_documents_in_the_top_five():
    assert recall_at_k(["a", "b", "c"], {"b", "z"}) == 0.5
    assert ndcg_at_k(["x", "a"], {"a"}) == pytest.approx(1 / 1.5849625, rel=1e-6)
    assert ndcg_at_k(["a"], {"a"}) == 1.0
    assert ndcg_at_k(["x"] * 5 + ["a"], {"a"}) == 0.0


@pytest.mark.django_db(transaction=True)
def test_every_arm_is_asked_through_the_chat_path_and_judged_by_the_qrels(tmp_path):
    write_answer_dataset(tmp_path)

    report = evaluate_retrieval(tmp_path, say=lambda line: None)

    assert report["pipeline"] == "product"
    assert report["setup"]["test_questions"] == 16
    assert report["setup"]["test_questions_with_user_context"] == 8
    for arm in ("flat", "oracle", "routed_top1", "routed_top2"):
        figures = report[arm]["hybrid"]
        assert 0.0 <= figures["ndcg@5"] <= 1.0
        assert 0.0 <= figures["recall@5"] <= 1.0
        assert report[arm]["retrieve_p50_ms"] >= 0.0
        assert set(report[arm]["by_turn"]) == {"first", "follow_up"}
        assert 0.0 <= report[arm]["nothing_retrieved"] <= 1.0
    # The gold expert's collection holds only its own four documents, the relevant one among them.
    assert report["oracle"]["hybrid"]["recall@5"] == 1.0
    assert report["oracle"]["answering_expert_is_gold"] == 1.0
    assert (report["oracle"]["nothing_retrieved"], report["oracle"]["ndcg@5_where_retrieved"]) == (0.0, report["oracle"]["hybrid"]["ndcg@5"])
    paired = report["paired"]["routed_top2 - flat"]
    assert paired["n"] == 16
    assert paired["ndcg@5"] == pytest.approx(report["routed_top2"]["hybrid"]["ndcg@5"] - report["flat"]["hybrid"]["ndcg@5"], abs=2e-4)

def test_the_validation_split_is_asked_when_named(tmp_path):
    write_answer_dataset(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "qrels.jsonl").read_text().splitlines()]
    kept = [r for r in rows if not r["query_id"].endswith("-q3")]  # q3: each document's validation question
    (tmp_path / "qrels.jsonl").write_text("\n".join(json.dumps(r) for r in kept) + "\n")

    with pytest.raises(ValueError, match="no val questions"):
        evaluate_retrieval(tmp_path, split="val", say=lambda line: None)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_the_replayed_retrieval_holds_its_floors():
    """Regression floors a little under today's replayed figures (docs/EVALUATIONS.md: flat 0.7225, oracle 0.745, routed
    top-2 0.724, top-1 0.676 nDCG@5), and the BM25 reference the shared README gives. Routed search reaches flat search
    here within noise (+0.0015, standard error 0.0058; issue 55 asks for at least flat): reported, not asserted."""
    report = evaluate_retrieval(DOC2DIAL, say=print)

    floors = {"flat": 0.70, "oracle": 0.72, "routed_top1": 0.65, "routed_top2": 0.70}
    for arm, floor in floors.items():
        assert report[arm]["hybrid"]["ndcg@5"] >= floor, arm
        assert report[arm]["hybrid"]["recall@5"] > 0.539, arm  # BM25 over one flat index
    assert report["oracle"]["hybrid"]["ndcg@5"] > 0.491  # BM25 over the gold agency's index
    assert report["routed_top2"]["answering_expert_is_gold"] > 0.85
    print("routed top-2 minus flat, nDCG@5:", report["paired"]["routed_top2 - flat"])


def test_the_command_names_the_files_a_dataset_lacks(tmp_path):
    (tmp_path / "queries.jsonl").write_text(json.dumps({"query_id": "q1", "text": "how", "domain": "a", "split": "test"}) + "\n")
    (tmp_path / "docs.jsonl").write_text(json.dumps({"doc_id": "d1", "domain": "a", "title": "t", "text": "x"}) + "\n")
    with pytest.raises(CommandError, match=re.escape("has no qrels.jsonl: evaluate retrieval indexes docs.jsonl and judges with qrels.jsonl")):
        call_command("evaluate", "retrieval", "--dataset", str(tmp_path), "--in-place")
    with pytest.raises(CommandError, match=re.escape("has no passages.jsonl or qrels_passages.jsonl")):
        call_command("evaluate", "retrieval", "--dataset", str(tmp_path), "--passages", "--in-place")
