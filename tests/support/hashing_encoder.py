"""A bag-of-words hashing encoder (deterministic, no model to load) and the one call that puts an encoder
in every knowledge code path, for the tests that index and search (not a test module)."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np

DIM = 64
# The knowledge modules that look up the process's encoder (``get_encoder``): a test's encoder stands in for it in each.
ENCODER_USERS = ("knowledge.points", "knowledge.indexing", "knowledge.search", "knowledge.views")
ROOT = Path(__file__).resolve().parents[2]
_FROM_ENCODERS = re.compile(r"^from encoders import (\([^)]*\)|.*)$", re.M)


class HashingEncoder:
    """Words hashed into 64 dimensions, L2-normalised: texts sharing words are close."""

    def __init__(self, name: str = "test-hashing-encoder"):
        self.name = name
        self.dimension = DIM
        self.calls = 0

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                out[i, zlib.crc32(word.encode()) % DIM] += 1.0
            out[i, DIM - 1] += 0.01  # never all zeros
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def modules_binding_get_encoder() -> list[str]:
    """The product's modules that bind the encoder function under their own name at import (``from encoders import get_encoder``).

    A test that replaces ``encoders.get_encoder`` must not be the first to import one of them: that module would bind the
    test's fake and keep it for the rest of the process (monkeypatch restores ``encoders``' attribute, not the module's
    own name), and later tests would index with it. tests/conftest.py imports them all before the first test.
    """
    packages = [p for top in (ROOT, ROOT / "platform") for p in sorted(top.iterdir()) if (p / "__init__.py").is_file()]
    found = []
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            if "migrations" in path.parts or not any(re.search(r"\bget_encoder\b", m) for m in _FROM_ENCODERS.findall(path.read_text())):
                continue
            module = path.relative_to(package.parent).with_suffix("")
            found.append(".".join(module.parts[:-1] if module.name == "__init__" else module.parts))
    return found


def use_encoder(monkeypatch, encoder) -> None:
    """Every knowledge code path (indexing, search, the console's search page) encodes with ``encoder``."""
    for module in ENCODER_USERS:
        monkeypatch.setattr(f"{module}.get_encoder", lambda *a, **k: encoder)


def serve_with(monkeypatch, settings, tmp_path, encoder) -> None:
    """A fresh embedded store under ``tmp_path``, and ``encoder`` in every knowledge code path and serving's chat path."""
    from knowledge.stores import get_store

    settings.QDRANT_URL, settings.QDRANT_PATH, settings.VAR_DIR = "", str(tmp_path / "qdrant"), tmp_path
    settings.EMBEDDING_MODEL = encoder.name
    use_encoder(monkeypatch, encoder)
    for module in ("serving.chat", "experts.generation.extractive"):
        monkeypatch.setattr(f"{module}.get_encoder", lambda *a, **k: encoder)
    get_store.cache_clear()


def crash_on(monkeypatch, encoder, word: str) -> None:
    """``encoder`` raises "encoder crashed" on a batch holding ``word`` and encodes every other batch as before."""
    real = encoder.encode

    def encode(texts, batch_size=64):
        if any(word in t for t in texts):
            raise RuntimeError("encoder crashed")
        return real(texts, batch_size)

    monkeypatch.setattr(encoder, "encode", encode)
