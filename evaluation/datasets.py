"""Datasets in the shared format for the evaluations, and their embeddings cached on disk. Pure: no Django.

A dataset is a folder holding ``queries.jsonl`` (``text``, ``domain``, ``intent``, ``split``; some
also ``docs.jsonl``, ``qrels.jsonl`` ...). ``cached_embeddings`` is the one embedding cache of every
evaluation and benchmark: ``<cache>/<name>-<model>-<fingerprint of the texts>.npy`` under
``~/.cache/switchboard/embeddings`` (or ``$SWITCHBOARD_EMBEDDING_CACHE``), so reruns skip the
encoder, and a change of texts or model is a miss that recomputes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV = "SWITCHBOARD_EMBEDDING_CACHE"

Say = Callable[[str], Any]


@dataclass
class LabelledQueries:
    """Texts with one gold label each, and the row of each text in the source file."""

    name: str
    texts: list[str]
    labels: list[str]
    rows: np.ndarray


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a JSON-lines file, in order (blank lines skipped)."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_queries(path: Path) -> list[dict]:
    """Every JSON object of a ``queries.jsonl`` file (or of ``<folder>/queries.jsonl``), in order."""
    path = Path(path)
    if path.is_dir():
        path = path / "queries.jsonl"
    return read_jsonl(path)


def split_names(records: list[dict]) -> np.ndarray:
    """Each record's ``split`` (``train``, ``val``, ``test``, ``oos``; ``""`` where it has none)."""
    return np.array([str(r.get("split") or "") for r in records], dtype=str)


def texts_fingerprint(texts: list[str]) -> str:
    """A short, stable hash of a list of texts (order matters), to key cached embeddings."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def embedding_cache_dir() -> Path:
    """Where embeddings are cached (outside VAR_DIR: they depend on the texts and the model only)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "switchboard" / "embeddings")


def embedding_cache_path(name: str, texts: list[str], model: str) -> Path:
    """``<cache>/<name>-<model>-<fingerprint>.npy``; a ``/`` in the model's name (a local folder) becomes ``_``."""
    return embedding_cache_dir() / f"{name}-{model.replace('/', '_')}-{texts_fingerprint(texts)}.npy"


def cached_embeddings(name: str, texts: list[str], model: str, say: Say = print, threads: int = 0, batch_size: int = 128) -> np.ndarray:
    """Embeddings of ``texts`` by ``model`` (L2-normalised float32), computed once and then read from the cache.

    ``threads`` and ``batch_size`` go to the encoder (``sbcommon.encoders.get_encoder``; 0 threads
    leaves torch's setting alone).
    """
    path = embedding_cache_path(name, texts, model)
    if path.exists():
        return np.load(path)
    from sbcommon.encoders import get_encoder

    say(f"embedding {len(texts):,} texts of {name} with {model} (cached afterwards in {path})")
    x = get_encoder(model, threads).encode(texts, batch_size=batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.partial.npy")
    np.save(tmp, x)
    tmp.replace(path)
    return x


def dataset_embeddings(dataset: Path, model: str, say: Say = print, threads: int = 0, batch_size: int = 128) -> tuple[list[dict], np.ndarray]:
    """Every record of ``dataset/queries.jsonl`` and the embedding of every record's text (cached under the folder's name)."""
    records = read_queries(dataset)
    texts = [r.get("text") or "" for r in records]
    return records, cached_embeddings(Path(dataset).name, texts, model, say=say, threads=threads, batch_size=batch_size)


def stratified_sample(labels: list[str], limit: int, seed: int = 0) -> np.ndarray:
    """Indices of at most ``limit`` rows keeping each label's share (every label keeps at least one row).

    Returns the indices sorted, so the sample keeps the file's order.
    """
    n = len(labels)
    if limit >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    arr = np.asarray(labels, dtype=object)
    chosen: list[np.ndarray] = []
    for value in sorted(set(labels)):
        members = np.nonzero(arr == value)[0]
        take = max(1, round(members.size * limit / n))
        chosen.append(rng.choice(members, size=min(take, members.size), replace=False))
    out = np.sort(np.concatenate(chosen))
    if out.size > limit:  # rounding up for small labels can overshoot by a few rows
        out = np.sort(rng.choice(out, size=limit, replace=False))
    return out


def labelled(records: list[dict], label: str, name: str = "", limit: int | None = None, seed: int = 0) -> LabelledQueries:
    """Rows with a non-null ``label`` (out-of-scope rows have none), optionally a stratified sample."""
    keep = [i for i, r in enumerate(records) if r.get(label) is not None and r.get("text")]
    labels = [str(records[i][label]) for i in keep]
    idx = np.asarray(keep, dtype=int)
    if limit is not None and limit < len(keep):
        pick = stratified_sample(labels, limit, seed=seed)
        idx = idx[pick]
        labels = [labels[i] for i in pick]
    return LabelledQueries(name=name, texts=[records[i]["text"] for i in idx], labels=labels, rows=idx)
