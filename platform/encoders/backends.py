"""A bare encoder (no batching, no cache) for a model, run by the chosen backend: the only module that imports the backends."""

from __future__ import annotations

from django.conf import settings

from .base import SUB_BATCH, Encoder
from .model_files import resolve_model_path
from .space import model_name, resolve_backend
from .torch_encoder import SentenceTransformerEncoder


def make_encoder(name: str, threads: int = 1, sub_batch: int | None = None, backend: str | None = None,
                 cache_dir: str | None = None, parallel: bool = False) -> Encoder:
    """A bare encoder (no batching, no cache) for ``name`` with ``backend`` (default: the setting). ``parallel``: an ONNX
    encoder runs a call's passes side by side on ``threads`` CPUs, one each, instead of each pass on all of them
    (``OnnxEncoder``); torch runs each pass on its threads either way."""
    backend = resolve_backend(backend)
    if backend.startswith("onnx"):
        from .onnx_encoder import OnnxEncoder

        sub_batch = int(sub_batch if sub_batch is not None else SUB_BATCH)
        if backend == "onnx-int8":
            # Dynamic quantisation scales activations per pass, so a text's int8 vector depends on the texts
            # beside it: one text a pass keeps a question's vector, and so its route, the same under load.
            sub_batch = 1
        return OnnxEncoder.exported(name, resolve_model_path(model_name(name)), backend, cache_dir or settings.ENCODER_EXPORT_DIR, threads=threads,
                                    sub_batch=sub_batch, parallel=parallel)
    return SentenceTransformerEncoder(model_name(name), threads=threads, sub_batch=sub_batch, backend=backend)
