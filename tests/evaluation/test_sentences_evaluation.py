"""``evaluate sentences``: the extractive answer's sentence scorer, hand-set, shipped and refitted, on a tiny dataset."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from evaluation.reader import answered
from evaluation.sentences import evaluate_sentences
from evaluation.workspace import Dataset
from experts.ml.sentence_scorer import load_scorer
from tests.support.eval_datasets import DOC2DIAL, write_answer_dataset


@pytest.fixture
def tiny_dataset(tmp_path, settings):
    settings.EXTRACTIVE_MIN_SCORE = 0.1
    write_answer_dataset(tmp_path)
    return tmp_path


@pytest.mark.django_db(transaction=True)
def test_the_report_scores_every_scorer_on_val_and_test_and_names_the_chosen_pull(tiny_dataset):
    lines: list[str] = []

    report = evaluate_sentences(tiny_dataset, say=lines.append)

    assert report["pipeline"] == "product"
    assert report["n_questions"] == {"train": 24, "val": 8, "test": 16}
    for split in ("val", "test"):
        figures = report["picked_f1"][split]
        assert set(figures) == {"hand_set", "linear_default", "default", "refit", "refit_mlp", "best_possible"}
        # Every answer is one of the documents' sentences, and the gold domain's passages are retrieved.
        assert figures["best_possible"] == 1.0
        assert all(0.0 <= figures[name] <= figures["best_possible"] for name in ("hand_set", "linear_default", "default", "refit", "refit_mlp"))
        # The best of the shipped scorer's first k sentences: k=1 is its pick, and more choices never do worse.
        ceiling = report["shortlist_ceiling"][split]
        assert list(ceiling) == ["1", "2", "3", "5"]
        assert ceiling["1"] == figures["default"]
        assert ceiling["1"] <= ceiling["2"] <= ceiling["3"] <= ceiling["5"] <= figures["best_possible"]
    assert report["pull_chosen_on_val"] in (0.0, 0.01, 0.1)
    assert set(report["weights"]["refit"]) == set(report["weights"]["linear_default"])
    assert report["network"]["members"] >= 1
    assert set(report["paired_val"]) == {"default", "refit_mlp"}
    held_out = report["held_out_domains"]  # every domain in turn unseen by both fits
    assert held_out["domains"]
    assert sum(d["n"] for d in held_out["domains"].values()) == report["n_questions"]["test"] == held_out["paired"]["n"]
    assert isinstance(report["targets"]["network_beats_linear_on_held_out_domains"], bool)
    own = report["own_domains"]  # each domain's own scorer against the shared one, on that domain's questions
    assert set(own["domains"]) == set(held_out["domains"])
    for split in ("val", "test"):
        assert sum(d[split]["n"] for d in own["domains"].values() if split in d) == report["n_questions"][split] == own["paired"][split]["n"]
    assert all(0.0 <= d["test"]["own"] <= 1.0 and 0.0 <= d["test"]["shared"] <= 1.0 for d in own["domains"].values())
    assert isinstance(report["targets"]["default_beats_hand_set_on_test"], bool)
    assert any(line.strip().startswith("test:") for line in lines)


@pytest.mark.django_db(transaction=True)
def test_the_command_writes_json_and_refuses_a_dataset_without_answers_or_documents(tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "sentences.json"
    scorer = out.with_name("scorer.json")
    call_command("evaluate", "sentences", "--dataset", str(tiny_dataset), "--json", str(out), "--save-scorer", str(scorer), "--skip-checks", "--in-place",
                 stdout=io.StringIO())
    report = json.loads(out.read_text())
    assert report["picked_f1"]["test"]["best_possible"] == 1.0
    saved = load_scorer(str(scorer))  # what EXTRACTIVE_SENTENCE_SCORER=<file> serves: the network fitted here, with its figures
    assert saved.report["picked_f1"]["test"]["network"] == report["picked_f1"]["test"]["refit_mlp"]
    assert "--save-scorer" in saved.report["command"]
    assert not list(scorer.parent.glob("*.partial"))

    rows = [json.loads(line) for line in (tiny_dataset / "queries.jsonl").read_text().splitlines()]
    (tiny_dataset / "queries.jsonl").write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "answer"}) for r in rows) + "\n")
    with pytest.raises(CommandError, match="train questions with an 'answer'"):
        call_command("evaluate", "sentences", "--dataset", str(tiny_dataset), "--skip-checks", "--in-place", stdout=io.StringIO())
    (tiny_dataset / "docs.jsonl").unlink()
    with pytest.raises(CommandError, match=r"no docs\.jsonl"):
        call_command("evaluate", "sentences", "--dataset", str(tiny_dataset), "--skip-checks", "--in-place", stdout=io.StringIO())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")
def test_on_doc2dial_the_shipped_weights_beat_the_hand_set_scorer_on_test():
    """Floors a little under today's figures: the shipped scorer's pick F1 on test against the hand-set weights' 0.3107 / 0.2947
    and 0.3064 / 0.2884 in two runs on 2026-12-07 (+0.016, +0.018; +0.02 when it was adopted, before the product's section
    chunks and keyword settings)."""
    report = evaluate_sentences(DOC2DIAL, say=lambda line: None)
    print("targets:", report["targets"], "picked F1 on test:", report["picked_f1"]["test"])

    assert report["targets"]["default_beats_hand_set_on_test"] is True
    # default_within_0.01_of_refit_on_test is reported, not asserted: a refit MLP's test F1 moves with its training run
    # (0.3139 and 0.3181 in two runs against the shipped 0.3064 and 0.3076), so the gap sits on either side of 0.01.
    assert report["picked_f1"]["test"]["default"] >= report["picked_f1"]["test"]["hand_set"] + 0.01
    assert report["targets"]["network_beats_linear_on_val"] is True
    assert report["targets"]["network_beats_linear_on_held_out_domains"] is True


def test_a_domain_without_an_answerable_train_question_gets_no_scorer_of_its_own():
    import numpy as np

    from evaluation.sentences import own_domains
    from experts.ml.sentence_scorer import FEATURES

    rng = np.random.default_rng(0)

    def group(best: float):
        return rng.normal(size=(3, len(FEATURES))), np.array([best, 0.0, 0.0])

    groups = {"train": [group(1.0) for _ in range(8)] + [group(0.0) for _ in range(4)], "val": [group(1.0), group(1.0)], "test": [group(1.0), group(1.0)]}
    domains = {"train": ["a"] * 8 + ["b"] * 4, "val": ["a", "b"], "test": ["a", "b"]}
    from experts.ml.sentence_scorer import fit_mlp

    report = own_domains(groups, domains, fit_mlp(groups["train"][:8]), say=lambda _: None)
    assert "nothing to fit" in report["domains"]["b"]["skipped"]
    assert report["domains"]["a"]["val"]["n"] == 1
    assert report["paired"]["val"]["n"] == 1


def test_a_set_without_a_val_split_has_one_carved_from_train(tiny_dataset):
    data = Dataset.read(tiny_dataset)
    for q in data.queries:
        q["split"] = "train" if q["split"] == "val" else q["split"]
    train = [q["query_id"] for q in data.questions("train") if q.get("answer")]

    rows, validation = answered(data, None)

    assert validation["source"] == "carved from train"
    assert rows["val"]
    assert not {q["query_id"] for q in rows["val"]} & {q["query_id"] for q in rows["train"]}
    assert sorted(q["query_id"] for q in rows["train"] + rows["val"]) == sorted(train)
    assert {q["domain"] for q in rows["val"]} == {q["domain"] for q in rows["train"]}  # stratified: every domain is held out
    assert answered(data, None)[0]["val"] == rows["val"]  # seeded
