"""The playground's answer, faked at ``serving.chat`` for the browser tests (not a test module): a routed,
cited answer, whole or streamed word by word."""

from __future__ import annotations

import threading

from serving import chat, route
from serving.chat import Source


def fake_answer(question: str, model: str = "auto", **_: object) -> chat.ChatResult:
    decision = route.Decision(
        experts=[{"slug": "dmv", "score": 0.8731}, {"slug": "ssa", "score": 0.0912}, {"slug": "va", "score": 0.0357}],
        router_version=1, embed_ms=11.2, route_ms=0.6,
    )
    cited = {
        "index": 1, "title": "Renew your driver's license", "expert": "dmv", "score": 0.7812, "url": "https://dmv.example.gov/renew",
        "text": "Most drivers can renew online up to six months before the license expires. You need your current license number and the last four digits of your SSN.",
    }
    other = {**cited, "index": 2, "title": "Replace a lost license", "score": 0.5120, "text": "If your license is lost or stolen, request a replacement online."}
    return chat.ChatResult(
        answer="Most drivers can renew online up to six months before the license expires. [1]", expert="dmv", decision=decision,
        citations=[cited], passages=[cited, other], grounded=True, mode=model,
        timings={"embed_ms": 11.2, "route_ms": 0.6, "retrieve_ms": 24.9, "generate_ms": 38.3, "total_ms": 75.0}, request_id="chatcmpl-browser",
    )




class FakeTurn:
    """What ``chat.open_stream`` returns for the streamed playground: ``fake_answer``'s text word by word.

    ``gate`` (a threading.Event) holds the stream after its first three words until set, like a slow model.
    """

    def __init__(self, question: str, model: str = "auto", gate: threading.Event | None = None):
        self._result = fake_answer(question, model)
        self._result.answer_source = "model"
        self.expert, self.source, self.result, self.gate = "dmv", Source(answer_source="model"), None, gate

    def __iter__(self):
        words = self._result.answer.split(" ")
        for i, word in enumerate(words):
            if self.gate is not None and i == 3:
                self.gate.wait(10)
            yield word if i == 0 else " " + word
        self.result = self._result

    def close(self):
        pass


def fake_open_stream(question: str, model: str = "auto", **_: object) -> FakeTurn:
    return FakeTurn(question, model)
