"""The answer cache: the model's answer served again to the same question, never across versions, prompts, passages or key scopes."""

from __future__ import annotations

import pytest

from experts.generation import GenerationRequest
from experts.ml.extractive import Passage
from serving import answer_cache
from tests.support.serving import chat, meta_of


@pytest.fixture(autouse=True)
def cache(settings):
    settings.ANSWER_CACHE_SIZE = 100
    answer_cache.reset()
    yield answer_cache.get_cache()
    answer_cache.reset()


def request(question: str = "How do I renew?", prompt: str = "Be brief.", text: str = "Renew by mail.") -> GenerationRequest:
    return GenerationRequest(question=question, expert="dmv", passages=[Passage(text=text, title="dmv guide")], system_prompt=prompt)


def test_the_same_question_again_gets_the_cached_answer_and_says_so(model_serving, client):
    first = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert first["cached"] is False
    response = chat(client, "how do I renew my licence", model="auto:fast")
    meta = meta_of(response)
    assert (meta["cached"], meta["cached_question"], meta["answer_source"]) == (True, "how do I renew my licence", "model")
    assert response.json()["choices"][0]["message"]["content"] == "model: The dmv office handles this. [1]"
    assert meta["citations"][0]["title"] == "dmv guide"  # the cited passage comes back with the answer
    assert len(model_serving["model"].requests) == 1  # the model wrote it once


def test_a_new_version_or_another_key_scope_never_reads_the_entry(model_serving, client, cache):
    from experts.models import Expert, ExpertVersion

    chat(client, "how do I renew my licence", model="auto:fast")
    ExpertVersion.objects.create(expert=Expert.objects.get(slug="dmv"), version=9, status="active", system_prompt="Be brief.")
    from serving.route import clear_serving_caches

    clear_serving_caches()
    meta = meta_of(chat(client, "how do I renew my licence", model="auto:fast"))
    assert meta["cached"] is False  # another version and prompt: another key
    assert len(model_serving["model"].requests) == 2
    key_all = answer_cache.cache_key(request(prompt="Another prompt."), 9, None)
    key_scoped = answer_cache.cache_key(request(prompt="Another prompt."), 9, {"dmv"})
    cache.store(key_all, answer_cache.Cached("q", "an answer [1]"))
    assert cache.lookup(key_scoped) is None
    assert cache.lookup(key_all).text == "an answer [1]"


def test_only_the_same_question_and_passages_hit_and_the_size_bounds_the_cache():
    key = answer_cache.cache_key(request(), 1, None)
    assert answer_cache.cache_key(request("  how do i   RENEW? "), 1, None) == key  # case and spacing aside
    assert answer_cache.cache_key(request("How do I renew online?"), 1, None) != key  # another question
    assert answer_cache.cache_key(request(text="Renew online."), 1, None) != key  # a changed document
    cache = answer_cache.AnswerCache(size=2)
    cache.store("a", answer_cache.Cached("first", "A"))
    cache.store("b", answer_cache.Cached("second", "B"))
    assert cache.lookup("a").question == "first"  # "a" is now the most recently used
    cache.store("c", answer_cache.Cached("third", "C"))
    assert len(cache) == 2
    assert cache.lookup("b") is None  # the least recently used went first
    assert answer_cache.AnswerCache(size=0).lookup("a") is None  # size 0: off
