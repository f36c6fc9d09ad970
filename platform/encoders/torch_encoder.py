"""The sentence encoder run by torch (sentence-transformers), in float32 or bfloat16."""

from __future__ import annotations

import os
import threading

import numpy as np

from .base import SUB_BATCH
from .model_files import resolve_model_path
from .space import resolve_backend


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local folder, on the CPU or a GPU (``backend``: "torch" or "torch-bf16", see ``resolve_backend``)."""

    def __init__(self, name: str, threads: int = 1, sub_batch: int | None = None, backend: str = "torch"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            # Web and worker processes share a few cores; small models run faster on one thread.
            torch.set_num_threads(threads)
        self.name = name
        self.backend = resolve_backend(backend)
        if self.backend not in ("torch", "torch-bf16"):
            raise ValueError(f"SentenceTransformerEncoder runs torch backends, not {self.backend!r} (see make_encoder)")
        kwargs = {"model_kwargs": {"dtype": torch.bfloat16}} if self.backend == "torch-bf16" else {}
        self._model = SentenceTransformer(resolve_model_path(name), device="cpu", local_files_only=True, **kwargs)
        self.dimension = int(self._model.get_embedding_dimension())
        # Texts per forward pass at most (SUB_BATCH): sentence-transformers sorts a call's texts by length
        # and pads each pass to its longest text, so small passes of similar lengths waste less on padding.
        self.sub_batch = max(1, int(sub_batch if sub_batch is not None else SUB_BATCH))
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=max(1, min(int(batch_size), self.sub_batch)), normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.backend == "torch-bf16":  # normalised again in float32: bfloat16's own norm is only ~3 digits exact
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors
