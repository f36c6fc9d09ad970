"""A fake vLLM server for tests (not a test module): responses recorded on a real one, replayed in turn.

The recordings in ``tests/experts/fixtures/vllm/`` were made by ``tools/vllm_check.py --record``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

FIXTURES = Path(__file__).resolve().parents[1] / "experts" / "fixtures" / "vllm"


def recorded(name: str) -> dict:
    """The recording ``name``: the request a real vLLM server was sent and its response."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def replay(name: str, **changes) -> httpx.Response:
    """The recorded response ``name`` (``changes`` override parts of its JSON body)."""
    response = recorded(name)["response"]
    if response["json"] is None:
        return httpx.Response(response["status"], text=response["text"], headers={"content-type": response["content_type"]})
    return httpx.Response(response["status"], json={**response["json"], **changes})


class FakeVllm:
    """Stands in for the network: answers each request with the next queued response (or raises the queued
    exception) and keeps what it received."""

    def __init__(self, *responses: httpx.Response | Exception):
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def bodies(self) -> list[dict]:
        return [json.loads(r.content) for r in self.requests]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
