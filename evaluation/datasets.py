"""Datasets in the shared format for the evaluations, and their embeddings cached on disk. Pure: no Django.

A dataset is a folder holding ``queries.jsonl`` (``text``, ``domain``, ``intent``, ``split``; some
also ``docs.jsonl``, ``qrels.jsonl`` ...). ``cached_embeddings`` is the one embedding cache of every
evaluation and benchmark: ``<cache>/<name>-<model>-<fingerprint of the texts>.npy`` under
``~/.cache/switchboard/embeddings`` (or ``$EMBEDDING_DISK_CACHE``, the product's own vector cache), so reruns skip the
encoder, and a change of texts or model is a miss that recomputes.

The rules every evaluation shares live here too: ``user_turns`` (a conversation's context as the
product keeps it: the user's questions, never the agent's answers), ``carve_validation`` and
``validation_note`` (a seeded stratified validation split when a dataset has none, and the words a
report says it with).
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

CACHE_ENV = "EMBEDDING_DISK_CACHE"  # the product's vector cache folder (``encoders.disk_cache``) holds these files too

Say = Callable[[str], Any]


@dataclass
class LabelledQueries:
    """Texts with one gold label each, and the row of each text in the source file."""

    texts: list[str]
    labels: list[str]
    rows: np.ndarray


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a JSON-lines file, in order (blank lines skipped)."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """``rows`` as a JSON-lines file, written beside ``path`` and renamed into place: never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


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
    """``<cache>/<name>-<model>[-<backend>]-<fingerprint>.npy``; a ``/`` in the model's name (a local folder) becomes ``_``.

    A backend whose vectors differ from float32 torch's (bfloat16, int8) is part of the name: an
    evaluation embeds as serving does. torch and ONNX float32 share one file: their vectors agree to ~1e-6.
    """
    from encoders import resolve_backend

    backend = resolve_backend()
    suffix = "" if backend in ("torch", "onnx") else f"-{backend}"
    return embedding_cache_dir() / f"{name}-{model.replace('/', '_')}{suffix}-{texts_fingerprint(texts)}.npy"


def cached_embeddings(name: str, texts: list[str], model: str, say: Say = print, threads: int = 0, batch_size: int = 128) -> np.ndarray:
    """Embeddings of ``texts`` by ``model`` (L2-normalised float32), computed once and then read from the cache.

    ``threads`` and ``batch_size`` go to the encoder (``encoders.get_encoder``; 0 threads
    leaves torch's setting alone).
    """
    path = embedding_cache_path(name, texts, model)
    if path.exists():
        return np.load(path)
    from encoders import get_encoder

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


def labelled(records: list[dict], label: str, limit: int | None = None, seed: int = 0) -> LabelledQueries:
    """Rows with a non-null ``label`` (out-of-scope rows have none), optionally a stratified sample."""
    keep = [i for i, r in enumerate(records) if r.get(label) is not None and r.get("text")]
    labels = [str(records[i][label]) for i in keep]
    idx = np.asarray(keep, dtype=int)
    if limit is not None and limit < len(keep):
        pick = stratified_sample(labels, limit, seed=seed)
        idx = idx[pick]
        labels = [labels[i] for i in pick]
    return LabelledQueries(texts=[records[i]["text"] for i in idx], labels=labels, rows=idx)


def user_turns(record: dict, max_turns: int | None = None) -> list[str]:
    """The user's own earlier turns of a record's conversation (``context``), oldest first.

    The product stores user questions only (never the agent's answers): a turn counts when it is a
    plain string or a ``{speaker, text}`` whose speaker is ``user`` (or missing). doc2dial's agent
    turns copy the gold document, so reading them would measure a leak, not routing.
    """
    turns = record.get("context") or []
    if not isinstance(turns, list):
        return []
    out = []
    for turn in turns:
        if isinstance(turn, dict):
            if (turn.get("speaker") or "user") != "user":
                continue
            text = str(turn.get("text") or "")
        else:
            text = str(turn)
        if text.strip():
            out.append(text)
    return out[-max_turns:] if max_turns else out


def carve_validation(labels: list, train: np.ndarray, share: float = 0.1, seed: int = 0) -> np.ndarray:
    """A seeded, stratified ``share`` of the ``train`` rows (a boolean mask) for datasets without a val split.

    Each label with at least two training rows gives ``max(1, round(share * n))`` of them; a label
    with one row keeps it in training.
    """
    rng = np.random.default_rng(seed)
    val = np.zeros(len(labels), dtype=bool)
    rows = np.flatnonzero(train)
    by_label: dict[Any, list[int]] = {}
    for i in rows:
        by_label.setdefault(labels[i], []).append(int(i))
    for value in sorted(by_label, key=str):
        members = by_label[value]
        if len(members) >= 2:
            val[rng.choice(members, size=max(1, round(share * len(members))), replace=False)] = True
    return val


def validation_note(carved: bool, share: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """What the JSON reports say about where their validation rows came from."""
    if carved:
        return {"source": "carved from train", "share": share, "seed": seed, "stratified_by": "label",
                "why": "the dataset has no val split; these rows left training"}
    return {"source": "the dataset's val split"}


def typo_copy_encoder(name: str, model: str, say: Say = print) -> Callable[[list[str]], np.ndarray]:
    """The encoder as ``train_text_router`` needs it for its typo copies, cached by text like every evaluation embedding."""
    return lambda texts: cached_embeddings(f"{name}-router-typo-copies", texts, model, say)
