"""``GENERATOR=vllm`` against any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama), through the chat API.

A fake server runs in a thread of the test process (``http.server`` on a free localhost port), serving
``/v1/chat/completions`` (whole and streamed) and ``/v1/models`` like Ollama: one model, no adapter
names. The expert's documents are ingested and searched for real (the hashing encoder stands in for
MiniLM); the server must be shown the passages the in-process model would be shown, be asked for the
right model, and its text must come back cited; when it fails or is too slow, the extractive answer does.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.cache import caches

from experts.generation import get_generator
from experts.generation.transformers import TransformersGenerator
from experts.generation.vllm import VllmGenerator
from experts.ml.prompting import build_messages
from experts.models import ExpertVersion
from knowledge import ingest
from tests.factories import make_expert
from tests.support.hashing_encoder import HashingEncoder, serve_with
from tests.support.serving import chat, meta_of

pytestmark = pytest.mark.django_db

SERVED = "qwen2.5:0.5b"  # the one model the fake server knows, as Ollama names them
RENEW = (b"Renewing a licence\n\nYou can renew your driving licence online up to six months before it expires. "
         b"Bring your old licence to a service centre if it expired more than two years ago.")
QUESTION = "How early can I renew my driving licence online?"
WRITTEN = "You may renew it online up to six months before it expires [1]."


class FakeServer:
    """An OpenAI-compatible server that knows one model; ``fail`` makes it answer HTTP 500, ``stall`` wait past the client's timeout."""

    def __init__(self):
        self.received: list[dict] = []
        self.fail = False
        self.stall = threading.Event()  # set: requests wait until ``release`` is set
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._json(200, {"object": "list", "data": [{"id": SERVED, "object": "model", "owned_by": "library"}]})
                return self._json(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.received.append(body)
                if self.path != "/v1/chat/completions":
                    return self._json(404, {"error": "not found"})
                if server.stall.is_set():
                    server.release.wait(10)
                if server.fail:
                    return self._json(500, {"error": {"message": "llama runner process has terminated", "type": "api_error"}})
                if body["model"] != SERVED:
                    return self._json(404, {"error": {"message": f"model \"{body['model']}\" not found, try pulling it first", "type": "api_error"}})
                if not body.get("stream"):
                    return self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": SERVED,
                                            "choices": [{"index": 0, "message": {"role": "assistant", "content": WRITTEN}, "finish_reason": "stop"}]})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in [WRITTEN[:12], WRITTEN[12:40], WRITTEN[40:-3], WRITTEN[-3:]]:  # "[1]." arrives split from its text
                    event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}}]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def chats(self) -> list[dict]:
        return [b for b in self.received if "messages" in b]


@pytest.fixture
def server():
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.release.set()
    fake.httpd.shutdown()
    fake.httpd.server_close()


@pytest.fixture
def dmv(server, settings, tmp_path, monkeypatch):
    """Expert dmv with one ingested document, answered through ``server`` (``GENERATOR=vllm``, its one model as the base model)."""
    from knowledge.stores import get_store

    encoder = HashingEncoder()
    serve_with(monkeypatch, settings, tmp_path, encoder)
    settings.GENERATOR, settings.VLLM_URL, settings.VLLM_BASE_MODEL_NAME = "vllm", server.url, SERVED
    settings.EVENTS_SYNC = True
    get_generator.cache_clear()
    caches[settings.BREAKER_CACHE].clear()
    expert = make_expert("dmv", "Motor Vehicles", chunk_size=300, chunk_overlap=50)
    ingest.ingest_files(expert, [("renew.txt", RENEW)])
    # What the generator was asked, to compare with what the in-process model would be shown (not a stand-in: it still answers).
    asked: list = []
    payload = VllmGenerator.payload
    monkeypatch.setattr(VllmGenerator, "payload", lambda self, request, *, stream: asked.append(request) or payload(self, request, stream=stream))
    yield {"expert": expert, "asked": asked}
    get_generator.cache_clear()
    caches[settings.BREAKER_CACHE].clear()
    get_store().close()
    get_store.cache_clear()


def shown_in_process(request) -> list[dict]:
    """The messages the in-process backend (GENERATOR=transformers) builds for ``request``."""
    return build_messages(request.question, TransformersGenerator.from_settings().prompt_passages(request), history=request.history,
                          system_prompt=request.system_prompt, citation_format=request.citation_format)


def streamed(response) -> tuple[str, dict]:
    """(the streamed text, the last chunk's switchboard metadata) of an SSE chat response."""
    assert response.status_code == 200
    chunks = [json.loads(b[len("data: "):]) for b in b"".join(response.streaming_content).decode().split("\n\n") if b.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c.get("choices"))
    return text, chunks[-1]["switchboard"]


def test_the_server_writes_the_answer_from_the_passages_the_in_process_model_would_be_shown(client, server, dmv):
    response = chat(client, QUESTION, model="dmv")

    meta = meta_of(response)
    assert response.json()["choices"][0]["message"]["content"] == WRITTEN
    assert (meta["answer_source"], meta["fallback_reason"], meta["adapter"]) == ("model", None, None)
    assert meta["citations"][0]["title"] == "Renewing a licence"
    [sent] = server.chats()
    assert sent["model"] == SERVED  # no adapter: the base model's served name
    assert sent["stream"] is False
    [request] = dmv["asked"]
    assert sent["messages"] == shown_in_process(request)
    assert "up to six months before it expires" in sent["messages"][-1]["content"]
    assert sent["messages"][-1]["content"].rstrip().endswith(QUESTION)


MENU = b"Driver licences\nRenew your driving licence online\nReplace a lost driving licence\nDriving licence fees\nContact the licence office\n"


def test_the_model_is_never_shown_a_menu_that_matches_the_question(client, server, dmv):
    ingest.ingest_files(dmv["expert"], [("menu.txt", MENU)])

    meta = meta_of(chat(client, QUESTION, model="dmv"))

    [sent] = server.chats()
    assert "Replace a lost driving licence" not in json.dumps(sent["messages"])
    assert "up to six months before it expires" in sent["messages"][-1]["content"]
    assert {c["title"] for c in meta["citations"]} == {"Renewing a licence"}


def test_a_streamed_answer_is_the_servers_text_with_its_citations(client, server, dmv):
    text, meta = streamed(chat(client, QUESTION, model="dmv", stream=True))

    assert text == WRITTEN
    assert meta["citations"][0]["title"] == "Renewing a licence"
    [sent] = server.chats()
    assert (sent["model"], sent["stream"]) == (SERVED, True)
    assert sent["messages"] == shown_in_process(dmv["asked"][0])


def test_an_expert_with_an_adapter_asks_for_it_and_a_server_without_adapters_answers_with_its_one_model(client, server, dmv, tmp_path):
    ExpertVersion.objects.create(expert=dmv["expert"], version=1, status="active", adapter_path=str(tmp_path / "dmv-v1"), base_model="base")

    response = chat(client, QUESTION, model="dmv")

    meta = meta_of(response)
    assert [b["model"] for b in server.chats()] == ["dmv-v1", SERVED]  # the adapter's name, then (404) the base model's
    assert response.json()["choices"][0]["message"]["content"] == WRITTEN
    assert (meta["answer_source"], meta["adapter"], meta["fallback_reason"]) == ("model", None, "adapter_unavailable")
    assert server.chats()[1]["messages"] == server.chats()[0]["messages"]


def test_a_server_error_falls_back_to_the_extractive_answer_and_says_why(client, server, dmv, caplog):
    server.fail = True
    with caplog.at_level(logging.WARNING, logger="serving.expert_answer"):
        response = chat(client, QUESTION, model="dmv")

    meta = meta_of(response)
    assert (meta["answer_source"], meta["fallback_reason"]) == ("extractive_fallback", "generator_unavailable")
    assert "up to six months before it expires" in response.json()["choices"][0]["message"]["content"]
    assert meta["citations"][0]["title"] == "Renewing a licence"
    assert len(server.chats()) == 3  # an HTTP 500 is retried twice
    [logged] = [r for r in caplog.records if r.getMessage() == "chat.generation_fallback"]
    assert logged.reason == "generator_unavailable"
    assert "HTTP 500: llama runner process has terminated" in logged.error


def test_a_server_slower_than_its_timeout_falls_back_to_the_extractive_answer(client, server, dmv, settings, caplog):
    settings.VLLM_TIMEOUT_S = 0.3
    get_generator.cache_clear()
    server.stall.set()
    with caplog.at_level(logging.WARNING, logger="serving.expert_answer"):
        text, meta = streamed(chat(client, QUESTION, model="dmv", stream=True))
    server.release.set()

    assert (meta["answer_source"], meta["fallback_reason"]) == ("extractive_fallback", "generator_timeout")
    assert "up to six months before it expires" in text
    [logged] = [r for r in caplog.records if r.getMessage() == "chat.generation_fallback"]
    assert "did not answer within 0.3 s" in logged.error
