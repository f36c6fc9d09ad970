"""The character view and the blended router: typo copies, one-question scoring, saving, and typos that route."""

import numpy as np
import pytest

from routing.ml.charview import CharView, add_typos, typo_copies
from routing.ml.textrouter import BLEND_WEIGHTS, TextRouter, fit_blend, train_text_router
from routing.ml.training import TrainConfig, train_router
from tests.support.toy_router import questions, trained, word_embed


def test_typos_are_seeded_and_touch_about_the_asked_share_of_letters():
    text = "how do i renew my driver license in new york " * 20
    assert typo_copies([text], 0.1, seed=5) == typo_copies([text], 0.1, seed=5)
    assert typo_copies([text], 0.1, seed=5) != typo_copies([text], 0.1, seed=6)
    assert add_typos(text, 0.0, np.random.default_rng(0)) == text
    changed = sum(a != b for a, b in zip(text, typo_copies([text], 0.1, seed=5)[0], strict=False))
    assert 0.05 * len(text) < changed < 0.9 * len(text)  # edits shift the rest of the text, so positions differ after the first


def test_one_question_scoring_matches_scikit_learn_and_survives_a_save(tmp_path):
    texts, y = questions(0, 30)
    view = CharView.fit(texts, y, 3)
    probes = ["how do i renw my drivr licnse", "STUDENT loan!!", "", "🙂", "x" * 3000, "über straße"]
    many = view.log_proba(probes)
    for i, text in enumerate(probes):
        np.testing.assert_allclose(view.log_proba_one(text), many[i], atol=1e-5)
    view.save(tmp_path / "cv")
    loaded = CharView.load(tmp_path / "cv")
    np.testing.assert_allclose(loaded.log_proba(probes), many, atol=1e-6)
    assert not list((tmp_path / "cv").glob("*.pkl"))  # no pickle: a router folder is data, never code


def test_two_experts_give_two_columns():
    texts, y = questions(1, 20)
    keep = y < 2
    view = CharView.fit([t for t, k in zip(texts, keep, strict=True) if k], y[keep], 2)
    probs = np.exp(view.log_proba(["student loan", "driver license"]))
    assert probs.shape == (2, 2)
    assert probs[0].argmax() == 1
    assert probs[1].argmax() == 0


def test_a_class_without_examples_is_refused():
    texts, y = questions(2, 10)
    with pytest.raises(ValueError, match="all 4 classes"):
        CharView.fit(texts, y, 4)


def test_typos_route_with_the_character_view_where_the_embedding_alone_fails():
    test_texts, y_test = questions(5, 40)
    typo_texts = typo_copies(test_texts, 0.1, seed=99)
    blended = trained().router
    alone = trained(char_view=False, typo_rate=0.0).router
    x = word_embed(typo_texts)
    with_view = (blended.scores(x, typo_texts)[0].argmax(axis=1) == y_test).mean()
    without = (alone.scores(x, typo_texts)[0].argmax(axis=1) == y_test).mean()
    assert with_view >= 0.9
    assert with_view > without + 0.1


def test_the_blend_is_chosen_on_validation_and_recorded():
    result = trained()
    router, metrics = result.router, result.metrics
    assert router.weight in BLEND_WEIGHTS
    assert router.weight > 0
    assert metrics["abstain_score"] == "prototype_similarity+char_confidence"
    assert metrics["typos"]["copies"] == 180
    assert metrics["char_view"]["val_accuracy_typos"] is not None
    assert router.score_scale > 0


def test_saved_router_scores_the_same_one_question_at_a_time(tmp_path):
    router = trained().router
    router.save(tmp_path / "v1")
    loaded = TextRouter.load(tmp_path / "v1")
    texts = ["how do i renw my drivr licnse", "apply for student aid", "weather tomorrow"]
    x = word_embed(texts)
    probs, scores = router.scores(x, texts)
    np.testing.assert_allclose(loaded.scores(x, texts)[0], probs, atol=1e-6)
    for i, text in enumerate(texts):
        p, s = loaded.score_one(x[i], text)
        np.testing.assert_allclose(p, probs[i], atol=1e-5)
        assert s == pytest.approx(float(scores[i]), abs=1e-5)
        # the words read first (as serving reads them while the question is encoded): the same figures
        early = loaded.score_one(x[i], text, char_logits=loaded.read_text(text))
        np.testing.assert_array_equal(early[0], p)
        assert early[1] == s


def test_a_router_saved_before_the_character_view_loads_as_the_network(tmp_path):
    texts, y = questions(6, 30)
    x = word_embed(texts)
    train, val = np.arange(90) % 3 != 0, np.arange(90) % 3 == 0
    result = train_router(x[train], y[train], x[val], y[val], 3, config=TrainConfig(epochs=5))
    result.model.save(tmp_path / "old")
    router = TextRouter.load(tmp_path / "old")
    assert router.char_view is None
    assert router.read_text(texts[0]) is None
    probs, _ = router.score_one(x[0], texts[0])
    assert probs.shape == (3,)


def test_texts_and_embeddings_must_pair_up():
    texts, y = questions(7, 10)
    with pytest.raises(ValueError, match="text and its embedding"):
        train_text_router(texts[:-1], word_embed(texts), y, texts, word_embed(texts), y, 3, word_embed)


def test_typo_copies_are_capped_to_a_seeded_sample_in_proportion():
    texts, y = questions(8, 60)
    val_texts, y_val = questions(9, 20)
    seen = []

    def counting_embed(batch):
        seen.append(len(batch))
        return word_embed(batch)

    config = TrainConfig(epochs=3, seed=0, typo_copies_max=60)
    result = train_text_router(texts, word_embed(texts), y, val_texts, word_embed(val_texts), y_val, 3, counting_embed, config=config)
    assert result.metrics["typos"]["copies"] == 45  # 60 of 240 questions: a quarter of train's 180
    assert seen == [60]
    assert result.metrics["char_view"]["val_accuracy_typos"] is not None


def test_the_validation_figures_are_the_served_routers_on_the_questions_as_written():
    result = trained()
    metrics = result.metrics
    assert metrics["val"]["accuracy"] == pytest.approx(metrics["char_view"]["val_accuracy_clean"])
    assert set(metrics["val"]) == {"loss", "accuracy", "top2_accuracy", "macro_f1"}
    assert metrics["val_network"]["accuracy"] != metrics["val"]["accuracy"]  # the network alone, typo copies included


def views(n: int, net_margin: float, char_margin: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` questions of 3 experts: each view's logits are noise plus ``*_margin`` on the true expert."""
    rng = np.random.default_rng(seed)
    y = rng.integers(3, size=n)

    def log_view(margin: float) -> np.ndarray:
        logits = rng.normal(size=(n, 3))
        logits[np.arange(n), y] += margin
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    return np.exp(log_view(net_margin)), log_view(char_margin), y


def blend_for(clean: tuple, typos: tuple) -> float:
    probs = np.vstack([clean[0], typos[0]])
    char = np.vstack([clean[1], typos[1]])
    y = np.concatenate([clean[2], typos[2]])
    return fit_blend(probs, np.ones(len(y)), char, y, len(clean[2]))["weight"]


def test_the_blend_weight_follows_the_questions_as_written_where_they_can_tell():
    # As written, the spelling view knows nothing: the NLL rises with every step of weight, well
    # beyond the noise, so the typo copies (which want all the weight) do not decide.
    clean = views(600, net_margin=4.0, char_margin=0.0, seed=0)
    typos = views(600, net_margin=0.5, char_margin=4.0, seed=1)
    assert blend_for(clean, typos) <= 0.2


def test_where_the_questions_as_written_cannot_tell_the_typo_copies_choose_the_weight():
    clean = views(600, net_margin=40.0, char_margin=40.0, seed=2)  # both views right and sure: every weight fits
    typos = views(600, net_margin=0.5, char_margin=4.0, seed=3)
    assert blend_for(clean, typos) == max(BLEND_WEIGHTS)
