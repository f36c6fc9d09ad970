"""Reading labelled query sets in the shared format (``queries.jsonl``) for evaluations. Pure: no Django."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class LabelledQueries:
    """Texts with one gold label each, and the row of each text in the source file."""

    name: str
    texts: list[str]
    labels: list[str]
    rows: np.ndarray


def read_queries(path: Path) -> list[dict]:
    """Every JSON object of a ``queries.jsonl`` file (or of ``<folder>/queries.jsonl``), in order."""
    path = Path(path)
    if path.is_dir():
        path = path / "queries.jsonl"
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def texts_fingerprint(texts: list[str]) -> str:
    """A short, stable hash of a list of texts (order matters), to key cached embeddings."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


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
