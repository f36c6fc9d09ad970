"""The extractive answer's sentence scorer: its features, its fits (linear and network), the FAQ pattern the shipped
scorer learned, and the specs settings may name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experts.ml.extractive import Passage, extractive_answer
from experts.ml.sentence_scorer import (
    DEFAULT_SCORER_FILE,
    FEATURES,
    HAND_SET,
    LISTWISE,
    LinearScorer,
    MlpScorer,
    best_of_top,
    compare_candidates,
    fit_mlp,
    fit_weights,
    load_scorer,
    picked_f1,
    sentence_features,
    weight_vector,
)

COL = {name: i for i, name in enumerate(FEATURES)}


def test_each_feature_reads_what_its_name_says():
    sentences = ["Renewing your licence", "Can I renew online?", "Yes, renew online in ten minutes.", "Offices open at nine."]
    tokens = [{"renewing", "licence"}, {"renew", "online"}, {"yes", "renew", "online", "ten", "minutes"}, {"offices", "open", "nine"}]
    cosines = np.array([0.5, 0.9, 0.6, 0.1])
    x = sentence_features({"renew", "online"}, sentences, tokens, cosines, passage_rank=2)
    assert x.shape == (4, len(FEATURES))
    assert x[:, COL["cosine"]].tolist() == [0.5, 0.9, 0.6, 0.1]
    assert x[:, COL["overlap"]].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert set(x[:, COL["passage_rank"]]) == {2.0}
    assert x[:, COL["first_in_passage"]].tolist() == [1, 0, 0, 0]
    assert x[:, COL["heading"]].tolist() == [1, 0, 0, 0]
    assert x[:, COL["question"]].tolist() == [0, 1, 0, 0]
    assert x[:, COL["previous_cosine"]].tolist() == [0.0, 0.5, 0.9, 0.6]
    assert x[:, COL["after_question"]].tolist() == [0, 0, 1, 0]
    assert x[2, COL["log_words"]] == pytest.approx(np.log1p(6))
    assert sentence_features(set(), [], [], np.zeros(0), passage_rank=0).shape == (0, len(FEATURES))


def test_the_overlap_gap_compares_a_sentence_with_every_passage_s_candidates():
    first = sentence_features({"renew", "online", "fee"}, ["Renew online.", "Pay it."], [{"renew", "online"}, {"pay"}], np.array([0.5, 0.2]), passage_rank=0)
    second = sentence_features({"renew", "online", "fee"}, ["The online renewal fee is ten dollars, renew now."], [{"online", "fee", "renew"}],
                               np.array([0.4]), passage_rank=1)
    x = np.concatenate([first, second])
    assert np.all(x[:, COL["overlap_gap"]] == 0)  # per passage it is not known yet
    assert compare_candidates(x) is x
    assert x[:, COL["overlap_gap"]] == pytest.approx([2 / 3 - 1, -1.0, 0.0])  # against the best over both passages
    assert compare_candidates(np.zeros((0, len(FEATURES)))).shape == (0, len(FEATURES))


def _faq_groups(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """FAQ-like questions: the sentence matching the question best is itself a question, the answer follows it."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n):
        k = int(rng.integers(1, 5))
        cos = rng.uniform(0.1, 0.5, size=6)
        cos[k] = rng.uniform(0.7, 0.9)  # the FAQ's own question
        cos[k + 1] = cos[k] - rng.uniform(0.05, 0.2)  # its answer, a little less like the question
        sentences = [f"Sentence number {i} of the page." for i in range(6)]
        sentences[k] = "Can I do the thing?"
        x = sentence_features(set(), sentences, [set()] * 6, cos, passage_rank=0)
        f1 = np.zeros(6)
        f1[k + 1] = rng.uniform(0.5, 1.0)
        groups.append((x, f1))
    return groups


def test_the_fit_learns_that_the_answer_follows_the_matching_question():
    train, held_out = _faq_groups(300, 0), _faq_groups(200, 1)
    fitted = fit_weights(train)
    assert fitted["after_question"] > 0 or fitted["previous_cosine"] > 0
    assert fitted["question"] < 0
    assert picked_f1(held_out, HAND_SET) == 0.0  # cosine alone quotes the question back
    assert picked_f1(held_out, fitted) > 0.6
    pulled = fit_weights(train, pull=100.0)
    assert np.allclose(weight_vector(pulled), weight_vector(HAND_SET), atol=0.05)  # a strong pull keeps the prior


def test_the_fit_refuses_data_with_no_answer_among_the_candidates():
    x = sentence_features(set(), ["One sentence here.", "Another one there."], [set(), set()], np.array([0.3, 0.4]), passage_rank=0)
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_weights([(x, np.zeros(2))])


def test_unknown_feature_names_are_refused():
    with pytest.raises(ValueError, match="unknown sentence features"):
        weight_vector({"cosine": 1.0, "sentiment": 2.0})


def test_the_shipped_scorer_answers_an_faq_with_its_answer_not_its_question(encoder):
    faq = Passage(text="Can I renew my driver license online? Yes, most drivers can renew online at the DMV website in ten minutes. "
                       "Offices are open on weekdays from nine to five.", title="Renewals", score=0.7)
    question = "Can I renew my driver license online?"
    hand_set = extractive_answer(question, [faq], encoder.encode, max_sentences=1, scorer=HAND_SET)
    assert hand_set.text.startswith("Can I renew")  # the question quoted back to the user
    assert extractive_answer(question, [faq], encoder.encode, max_sentences=1).text.startswith("Yes, most drivers can renew online")


def test_the_scorer_setting_reaches_the_extractive_generator(settings, encoder, monkeypatch, tmp_path):
    from experts.generation.base import GenerationRequest
    from experts.generation.extractive import ExtractiveGenerator

    monkeypatch.setattr("experts.generation.extractive.get_encoder", lambda *a, **k: encoder)
    faq = Passage(text="Can I renew my driver license online? Yes, most drivers can renew online at the DMV website in ten minutes.",
                  title="Renewals", score=0.7)
    request = GenerationRequest(question="Can I renew my driver license online?", expert="dmv", passages=[faq])
    # A network that scores as the hand-set weights do (GELU is the identity far above 0), saved as a fitted one is.
    hand_set = MlpScorer(weight_vector(HAND_SET)[:, None], np.array([20.0]), np.array([1.0]))
    (tmp_path / "hand_set.json").write_text(json.dumps(hand_set.to_dict()))
    settings.EXTRACTIVE_SENTENCE_SCORER = str(tmp_path / "hand_set.json")
    assert ExtractiveGenerator().generate(request).text.startswith("Can I renew")
    settings.EXTRACTIVE_SENTENCE_SCORER = "default"
    assert ExtractiveGenerator().generate(request).text.startswith("Yes, most drivers")


def test_the_answer_records_the_sentence_it_quoted_why_and_the_runner_up(encoder):
    from experts.ml.sentence_scorer import reasons

    blank = Passage(text="   ", title="Empty", score=0.9)
    faq = Passage(text="Can I renew my driver license online? Yes, most drivers can renew online at the DMV website in ten minutes. "
                       "Offices are open on weekdays from nine to five.", title="Renewals", score=0.7)
    answer = extractive_answer("Can I renew my driver license online?", [blank, faq], encoder.encode, max_sentences=1)
    quoted = answer.selection["quoted"][0]
    assert (quoted["passage"], quoted["sentence"]) == (2, 2)  # places among the passages given: the blank one counts
    assert quoted["text"].startswith("Yes, most drivers")
    assert "follows a sentence close to the question" in quoted["reasons"] or "follows a question" in quoted["reasons"]
    assert answer.selection["runner_up"]["passage"] == 2
    assert answer.selection["runner_up"]["score"] < quoted["score"]
    assert answer.selection["candidates"] == 3
    x = np.zeros((2, len(FEATURES)))
    x[0, COL["question"]] = 1.0  # the other candidate asks; the chosen one does not
    asking_costs = weight_vector({"cosine": 1.0, "question": -0.5})
    assert reasons(x, 1, asking_costs) == ["answers rather than asks"]
    assert reasons(x[:1], 0, asking_costs) == []  # nothing to stand out from


def _xor_groups(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two candidates per question: the answer is the heading when the page's first sentence asks, else the other one.
    No weights over the raw features can tell which is which; a network can."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n):
        x = np.zeros((2, len(FEATURES)))
        x[:, COL["cosine"]] = rng.uniform(0.4, 0.6, size=2)
        asks = bool(rng.integers(0, 2))
        x[0, COL["heading"]] = 1.0
        x[:, COL["question"]] = float(asks)
        f1 = np.array([1.0, 0.0]) if asks else np.array([0.0, 1.0])
        groups.append((x, f1))
    return groups


def test_the_network_learns_an_interaction_that_no_linear_weights_can():
    train, held_out = _xor_groups(400, 0), _xor_groups(200, 1)
    network = fit_mlp(train, members=2, epochs=30, seed=0)
    linear = fit_weights(train)
    assert picked_f1(held_out, network) > 0.95
    assert picked_f1(held_out, linear) < 0.7
    again = fit_mlp(train, members=2, epochs=30, seed=0)
    assert np.array_equal(again.w1, network.w1)
    assert again.b2 == network.b2


def test_the_network_is_one_function_of_the_raw_features_and_its_local_weights_are_its_gradient():
    rng = np.random.default_rng(3)
    network = MlpScorer(rng.normal(size=(len(FEATURES), 6)), rng.normal(size=6), rng.normal(size=6), 0.3)
    x = rng.normal(size=(4, len(FEATURES)))
    assert network.score(x).shape == (4,)
    assert network.score(x[1:2])[0] == pytest.approx(network.score(x)[1])  # a row's score does not depend on the others
    local = network.local_weights(x, 2)
    eps = 1e-6
    for j in range(len(FEATURES)):
        bumped = x.copy()
        bumped[2, j] += eps
        assert (network.score(bumped)[2] - network.score(x)[2]) / eps == pytest.approx(local[j], rel=1e-3, abs=1e-5)
    restored = MlpScorer.from_dict(network.to_dict())
    assert np.allclose(restored.score(x), network.score(x), atol=1e-5)
    assert np.array_equal(LinearScorer(weight_vector(HAND_SET)).local_weights(x, 0), weight_vector(HAND_SET))


def test_scorer_specs_and_what_is_refused(tmp_path):
    shipped = load_scorer(None)
    assert isinstance(shipped, MlpScorer)
    assert load_scorer("default") is shipped
    assert load_scorer(shipped) is shipped  # a scorer is its own spec
    assert shipped.report["dataset"] == "doc2dial"
    assert shipped.report["picked_f1"]["val"]["network"] > shipped.report["picked_f1"]["val"]["linear"]
    assert np.array_equal(load_scorer({"cosine": 2.0}).weights, weight_vector({"cosine": 2.0}))
    saved = tmp_path / "mine.json"
    saved.write_text(DEFAULT_SCORER_FILE.read_text())
    assert np.allclose(load_scorer(str(saved)).w1, shipped.w1)
    with pytest.raises(ValueError, match="cannot read"):
        load_scorer(str(tmp_path / "missing.json"))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        load_scorer(str(tmp_path / "broken.json"))
    for features in (["cosine", "nonsense"], ["cosine", "cosine"], [], None):
        with pytest.raises(ValueError, match="fit it again"):
            load_scorer(shipped.to_dict() | {"features": features})
    with pytest.raises(ValueError, match="one w1 row per feature"):
        load_scorer(shipped.to_dict() | {"features": ["cosine"]})
    with pytest.raises(ValueError, match="finite"):
        load_scorer(shipped.to_dict() | {"b2": float("nan")})
    with pytest.raises(ValueError, match="w1"):
        load_scorer(shipped.to_dict() | {"w2": [1.0]})
    with pytest.raises(ValueError, match="a sentence scorer is"):
        load_scorer({"cosine": "high"})


def test_the_scorer_setting_is_checked(settings, tmp_path):
    from experts.checks import sentence_scorer_check
    from experts.generation.extractive import scorer_spec

    for ok in ("default", str(DEFAULT_SCORER_FILE)):
        settings.EXTRACTIVE_SENTENCE_SCORER = ok
        assert sentence_scorer_check() == []
        assert scorer_spec() == ok
    for bad in (str(tmp_path / "nowhere.json"), "linear"):  # the linear weights are no longer served
        settings.EXTRACTIVE_SENTENCE_SCORER = bad
        assert [e.id for e in sentence_scorer_check()] == ["experts.E004"]


def test_a_network_fitted_before_a_feature_was_added_scores_as_it_did():
    rng = np.random.default_rng(5)
    older = [name for name in FEATURES if name not in LISTWISE]
    w1, b1, w2 = rng.normal(size=(len(older), 4)), rng.normal(size=4), rng.normal(size=4)
    saved = {"kind": "mlp", "features": older, "w1": w1.tolist(), "b1": b1.tolist(), "w2": w2.tolist(), "b2": 0.1}
    network = load_scorer(saved)
    x = rng.normal(size=(5, len(FEATURES)))
    hidden = x[:, [COL[name] for name in older]] @ w1 + b1
    expected = (0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))) @ w2 + 0.1
    assert network.score(x) == pytest.approx(expected)
    assert np.all(network.w1[[COL[name] for name in LISTWISE]] == 0)  # what it never saw does not move its score


def test_the_linear_fit_leaves_the_listwise_features_out():
    """Within a question a listwise feature is a per-sentence one minus a constant: no linear listwise score can use it."""
    groups = [(compare_candidates(x.copy()), f) for x, f in _faq_groups(60, 2)]
    weights = fit_weights(groups)
    assert set(weights) == set(FEATURES) - set(LISTWISE)
    assert all(weight_vector(weights)[COL[name]] == 0 for name in LISTWISE)


def test_best_of_top_is_the_best_f1_among_the_scorers_first_k_sentences():
    import numpy as np

    # One feature row per sentence; a linear scorer on the first feature ranks them 0, 1, 2.
    first = {name: 0.0 for name in FEATURES}
    first[FEATURES[0]] = 1.0
    x = np.zeros((3, len(FEATURES)))
    x[:, 0] = [3.0, 2.0, 1.0]
    groups = [(x, np.array([0.1, 0.5, 0.9])), (x, np.array([0.4, 0.2, 0.0]))]

    assert best_of_top(groups, first, 1) == picked_f1(groups, first) == pytest.approx(0.25)
    assert best_of_top(groups, first, 2) == pytest.approx((0.5 + 0.4) / 2)
    assert best_of_top(groups, first, 5) == pytest.approx((0.9 + 0.4) / 2)  # k beyond the candidates: all of them
    assert best_of_top([], first, 2) is None
