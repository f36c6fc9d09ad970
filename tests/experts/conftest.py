"""Fixtures for the LLM backends: a tiny random-weight causal LM built once per test session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEMO_DOCUMENTS = Path(__file__).resolve().parents[2] / "demo" / "documents"


def demo_texts(limit: int = 120) -> list[str]:
    """Texts of the bundled demo documents (the tokenizer's training corpus)."""
    texts: list[str] = []
    for path in sorted(DEMO_DOCUMENTS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["text"])
    return texts[:limit]


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> Path:
    """A Llama-architecture model with random weights and a locally trained tokenizer (seed 0)."""
    from experts.ml.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"), demo_texts(), vocab_size=1000, hidden_size=64, layers=2, heads=4)


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    """LoRA tests run torch on one thread: on a shared 2-core machine two threads are ~8x slower, not faster."""
    if "lora" not in request.node.nodeid:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def base(tmp_path, settings) -> Path:
    """A stand-in base model folder (a config only) that BASE_MODEL points at: enough for adapter checks, not for loading."""
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    settings.BASE_MODEL = str(folder)
    return folder
