"""The semantic answer cache: the model's answer served again to the same question, never across versions, prompts or key scopes."""

from __future__ import annotations

import numpy as np
import pytest

from serving import answer_cache
from tests.serving import test_generation_fallback as support

# The fake router, store, encoder and model of the generation tests.
encoder, no_experiment, router, store, model, fallback, serving = (
    support.encoder, support.no_experiment, support.router, support.store, support.model, support.fallback, support.serving)
chat, meta_of = support.chat, support.meta_of


@pytest.fixture(autouse=True)
def cache(settings):
    settings.ANSWER_CACHE_SIZE, settings.ANSWER_CACHE_MIN_COSINE = 100, 0.95
    answer_cache.reset()
    yield answer_cache.get_cache()
    answer_cache.reset()


def test_the_same_question_again_gets_the_cached_answer_and_says_so(serving, client):
    first = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert first["cached"] is False
    response = chat(client, "how do I renew my licence", model="auto:fast")
    meta = meta_of(response)
    assert (meta["cached"], meta["cached_question"], meta["answer_source"]) == (True, "how do I renew my licence", "model")
    assert response.json()["choices"][0]["message"]["content"] == "model: The dmv office handles this. [1]"
    assert meta["citations"][0]["title"] == "dmv guide"  # the cited passage comes back with the answer
    assert len(serving["model"].requests) == 1  # the model wrote it once


def test_a_new_version_or_another_key_scope_never_reads_the_entry(serving, client, cache):
    from experts.models import Expert, ExpertVersion

    chat(client, "how do I renew my licence", model="auto:fast")
    ExpertVersion.objects.create(expert=Expert.objects.get(slug="dmv"), version=9, status="active", system_prompt="Be brief.")
    from serving.route import clear_serving_caches

    clear_serving_caches()
    meta = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert meta["cached"] is False  # another version and prompt: another key
    assert len(serving["model"].requests) == 2
    key_all = answer_cache.cache_key("dmv", 9, None, "Another prompt.", None)
    key_scoped = answer_cache.cache_key("dmv", 9, None, "Another prompt.", {"dmv"})
    v = np.ones(4, dtype=np.float32) / 2
    cache.store(key_all, v, answer_cache.Cached("q", "an answer [1]"))
    assert cache.lookup(key_scoped, v) is None
    assert cache.lookup(key_all, v)[0].text == "an answer [1]"


def test_the_threshold_and_the_size_bound_the_cache():
    cache = answer_cache.AnswerCache(size=2, min_cosine=0.9)
    a, b = np.array([1.0, 0.0], dtype=np.float32), np.array([0.8, 0.6], dtype=np.float32)  # cosine 0.8
    cache.store(("k",), a, answer_cache.Cached("first", "A"))
    assert cache.lookup(("k",), b) is None  # not close enough
    assert cache.lookup(("k",), a)[0].question == "first"
    cache.store(("k",), b, answer_cache.Cached("second", "B"))
    cache.store(("other",), a, answer_cache.Cached("third", "C"))
    assert len(cache) <= 2
    assert answer_cache.AnswerCache(size=0, min_cosine=0.9).lookup(("k",), a) is None  # size 0: off
