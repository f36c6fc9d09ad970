"""The tiny random-weight causal LM the LLM backend tests run on (not a test module); its fixture is
registered for every test folder by ``tests/conftest.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# The tiny model's tokenizer is trained on a pinned corpus: the 60 demo documents as they were when it was
# pinned (December 2026). Trained on the live demo, the random model's outputs (and the tests that read
# them) changed whenever the demo's text was repaired.
CORPUS = Path(__file__).resolve().parents[1] / "experts" / "data" / "tiny_lm_corpus.jsonl.gz"


def corpus_texts(limit: int = 120) -> list[str]:
    """Texts of the pinned corpus (the tokenizer's training corpus)."""
    import gzip

    with gzip.open(CORPUS, "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle if line.strip()]
    return texts[:limit]


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> Path:
    """A Llama-architecture model with random weights and a locally trained tokenizer (seed 0)."""
    from experts.ml.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"), corpus_texts(), vocab_size=1000, hidden_size=64, layers=2, heads=4)
