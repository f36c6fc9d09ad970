"""``evaluate retrieval``: flat, oracle and routed retrieval on a dataset in the shared format.

The fast test runs the whole evaluation on a tiny two-domain dataset written here (hashing encoder,
embeddings cached in a temporary folder); the slow one runs doc2dial for real and checks the targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.retrieval import evaluate_retrieval, ndcg_at_k, recall_at_k
from tests.knowledge.conftest import HashingEncoder

DOC2DIAL = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "doc2dial"


def test_metrics_count_documents_in_the_top_five():
    assert recall_at_k(["a", "b", "c"], {"b", "z"}) == 0.5
    assert ndcg_at_k(["x", "a"], {"a"}) == pytest.approx(1 / 1.5849625, rel=1e-6)
    assert ndcg_at_k(["a"], {"a"}) == 1.0
    assert ndcg_at_k(["x"] * 5 + ["a"], {"a"}) == 0.0


def write_dataset(folder: Path) -> None:
    topics = {
        "cars": ["licence renewal online", "vehicle registration plates", "driving test booking", "parking permit fees"],
        "money": ["retirement pension payments", "tax refund status", "student loan repayment", "disability benefit claim"],
    }
    docs, queries, qrels = [], [], []
    for domain, subjects in topics.items():
        for d, subject in enumerate(subjects):
            doc_id = f"{domain}-{d}"
            docs.append({"doc_id": doc_id, "domain": domain, "title": subject.title(), "text": f"All about {subject}. " * 5})
            for q in range(6):
                split = ["train", "train", "train", "val", "test", "test"][q]
                qid = f"{doc_id}-q{q}"
                context = [{"speaker": "user", "text": f"question about {domain}"}] if q % 2 else []
                queries.append({"query_id": qid, "text": f"{subject} question {q}", "domain": domain, "split": split, "context": context})
                qrels.append({"query_id": qid, "doc_id": doc_id})
    for name, rows in (("docs.jsonl", docs), ("queries.jsonl", queries), ("qrels.jsonl", qrels)):
        (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@pytest.mark.django_db
def test_the_evaluation_reports_every_mode_and_method(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_CACHE", str(tmp_path / "cache" / "embeddings"))
    encoder = HashingEncoder()
    monkeypatch.setattr("sbcommon.encoders.get_encoder", lambda *a, **k: encoder)
    settings.EMBEDDING_MODEL = encoder.name
    write_dataset(tmp_path)
    lines: list[str] = []

    report = evaluate_retrieval(tmp_path, say=lines.append)

    for mode in ("flat", "oracle", "routed_top1", "routed_top2"):
        assert set(report[mode]) == {"dense", "sparse", "hybrid"}
        for figures in report[mode].values():
            assert set(figures) == {"recall@5", "ndcg@5"}
            assert 0.0 <= figures["ndcg@5"] <= figures["recall@5"] <= 1.0  # one relevant document per question
    assert report["oracle"]["sparse"]["recall@5"] == 1.0  # every question names its document's subject
    assert report["setup"]["test_questions"] == 16
    assert report["index_s"] >= 0
    assert report["search_p50_ms"] > 0
    assert report["router"]["kind"].startswith("RouterNet")
    assert any("routed_top2" in line for line in lines)
    # A second run reads the embeddings and the router from the cache.
    calls = encoder.calls
    evaluate_retrieval(tmp_path, say=lambda line: None)
    assert encoder.calls == calls


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_routed_hybrid_retrieval_beats_flat_and_closes_most_of_the_gap():
    report = evaluate_retrieval(DOC2DIAL, say=print)

    ndcg = {mode: {m: report[mode][m]["ndcg@5"] for m in ("dense", "sparse", "hybrid")} for mode in ("flat", "oracle", "routed_top1", "routed_top2")}
    assert ndcg["routed_top2"]["hybrid"] > ndcg["flat"]["hybrid"]
    assert report["setup"]["hybrid_ndcg_gap_captured_by_routed_top2"] >= 0.9
    for mode, scores in ndcg.items():
        assert scores["hybrid"] > max(scores["dense"], scores["sparse"]), mode
        assert report[mode]["hybrid"]["recall@5"] > 0.539, mode  # BM25 over one flat index
        assert scores["hybrid"] > 0.443, mode
    assert ndcg["oracle"]["hybrid"] > 0.491
