"""The fast tier's encoder: a bag of word pieces distilled onto the full sentence encoder's vectors.

``StaticEncoder`` reads a question as the mean of one learned vector per word piece (the full
encoder's tokenizer), through one linear map, normalised: no attention, a fraction of a millisecond.
``distil`` starts from the full encoder's input embeddings and learns to reproduce its sentence
vectors (cosine loss, early-stopped on validation), so its vectors land in the same space and the
same collections can be searched with them. What it gives up is in docs/EVALUATIONS.md. No Django.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FILE = "fast_encoder.npz"
META = "fast_encoder.json"
MAX_PIECES = 64  # word pieces read per question (questions are short; the full encoder reads 256)
# The experts' documents lend the distillation their sentences (words users ask about that training questions may
# never use), a seeded sample of at most this many to bound the job's time. None of these settings was tuned.
DOCUMENT_SENTENCES = 20_000
LEARNING_RATE = 3e-3
BATCH_SIZE = 128
MAX_EPOCHS = 12
PATIENCE = 2


@dataclass
class DistilReport:
    """How the distillation went: epochs run, validation cosine per epoch and the best, seconds."""

    epochs: int = 0
    val_cosine: list[float] = field(default_factory=list)
    best_val_cosine: float | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "val_cosine": [round(c, 4) for c in self.val_cosine],
                "best_val_cosine": None if self.best_val_cosine is None else round(self.best_val_cosine, 4), "seconds": round(self.seconds, 1)}


class StaticEncoder:
    """``encode(texts)``: the mean of each word piece's row of ``table`` plus ``bias``, L2-normalised.

    ``table`` is the learned piece vectors already multiplied by the linear map (the mean of mapped
    rows is the map of the mean), so a question costs a tokenizer call and a mean of a few rows.
    """

    def __init__(self, table: np.ndarray, bias: np.ndarray, tokenizer_file: str | Path, name: str = "fast"):
        from tokenizers import Tokenizer

        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.bias = np.asarray(bias, dtype=np.float32)
        self.tokenizer_file = str(tokenizer_file)
        self.tokenizer = _piece_tokenizer(Tokenizer.from_file(self.tokenizer_file))
        self.name = name
        self.dimension = int(self.table.shape[1])

    def pieces(self, texts: list[str]) -> list[list[int]]:
        return [ids[:MAX_PIECES] for ids in (e.ids for e in self.tokenizer.encode_batch([t or "" for t in texts]))]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, ids in enumerate(self.pieces(list(texts))):
            out[i] = (self.table[ids].mean(axis=0) if ids else 0.0) + self.bias
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-12, None)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        # float16 halves the file (~23 MB for MiniLM's 30,522 pieces); vectors move by < 1e-3 cosine.
        np.savez(folder / FILE, table=self.table.astype(np.float16), bias=self.bias)
        (folder / META).write_text(json.dumps({"tokenizer_file": self.tokenizer_file, "name": self.name, "dimension": self.dimension}))

    @classmethod
    def load(cls, folder: str | Path, tokenizer_file: str | Path | None = None) -> StaticEncoder:
        """A saved encoder; ``tokenizer_file`` overrides the recorded one (the full model moved)."""
        folder = Path(folder)
        meta = json.loads((folder / META).read_text())
        with np.load(folder / FILE) as data:
            return cls(data["table"].astype(np.float32), data["bias"], tokenizer_file or meta["tokenizer_file"], meta.get("name", "fast"))

    @staticmethod
    def exists(folder: str | Path, tokenizer_file: str | Path | None = None) -> bool:
        """A saved encoder, and the tokenizer it reads (``tokenizer_file``, else the recorded one) is there."""
        folder = Path(folder)
        if not (folder / FILE).exists() or not (folder / META).exists():
            return False
        try:
            recorded = json.loads((folder / META).read_text())["tokenizer_file"]
        except (OSError, ValueError, KeyError):
            return False
        return Path(tokenizer_file or recorded).exists()


def _piece_tokenizer(tokenizer: Any) -> Any:
    """The tokenizer without special tokens, padding or truncation (the bag reads the pieces alone)."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if tokenizer.post_processor is not None:
        from tokenizers.processors import TemplateProcessing

        tokenizer.post_processor = TemplateProcessing(single="$A", pair="$A $B")
    return tokenizer


def document_sentences(documents: Iterable[str], limit: int = DOCUMENT_SENTENCES, seed: int = 0) -> list[str]:
    """Distinct sentences of 3 to 60 words from ``documents`` (the extractive answer's splitter), a seeded sample of at most ``limit``."""
    from experts.ml.extractive import split_sentences

    found = sorted({s for text in documents for s in split_sentences(text or "") if 3 <= len(s.split()) <= 60})
    if len(found) <= limit:
        return found
    rng = np.random.default_rng(seed)
    return [found[i] for i in sorted(rng.choice(len(found), size=limit, replace=False))]


def full_model_parts(model_folder: str | Path) -> tuple[np.ndarray, Path]:
    """The full encoder's input word-piece embeddings (vocab, D) and its ``tokenizer.json``."""
    from safetensors.numpy import load_file

    folder = Path(model_folder)
    tokenizer_file = folder / "tokenizer.json"
    weights = folder / "model.safetensors"
    if not tokenizer_file.exists() or not weights.exists():
        raise ValueError(f"{folder} has no tokenizer.json and model.safetensors: the fast tier distils from a model folder that has both")
    tensors = load_file(str(weights))
    name = next((k for k in tensors if k.endswith("word_embeddings.weight")), None)
    if name is None:
        raise ValueError(f"{weights} holds no word_embeddings.weight")
    return np.asarray(tensors[name], dtype=np.float32), tokenizer_file


def distil(
    texts: list[str], targets: np.ndarray, texts_val: list[str], targets_val: np.ndarray, init_table: np.ndarray, tokenizer_file: str | Path,
    *, seed: int = 0, max_epochs: int = MAX_EPOCHS, threads: int = 1,
) -> tuple[StaticEncoder, DistilReport]:
    """Fit a ``StaticEncoder`` whose vectors of ``texts`` match ``targets`` (the full encoder's, L2-normalised).

    ``texts_val``/``targets_val`` choose the epoch (the best validation cosine is kept). Raises
    ValueError on mismatched or empty inputs.
    """
    import torch

    if len(texts) != len(targets) or len(texts_val) != len(targets_val):
        raise ValueError("each text needs its target vector")
    if not texts or not texts_val:
        raise ValueError("distillation needs training and validation texts")
    if targets.shape[1] != init_table.shape[1]:
        raise ValueError(f"targets have {targets.shape[1]} dimensions, the piece table {init_table.shape[1]}")
    started = time.perf_counter()
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    torch.manual_seed(seed)
    probe = StaticEncoder(init_table, np.zeros(init_table.shape[1]), tokenizer_file)
    ids, ids_val = probe.pieces(texts), probe.pieces(texts_val)
    dim = init_table.shape[1]
    # Sparse gradients: a batch touches a few hundred of the 30,000 rows, and a dense Adam step over
    # the whole table was most of a step's time.
    table = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(init_table), freeze=False, mode="mean", sparse=True)
    linear = torch.nn.Linear(dim, dim)
    optimizers = [torch.optim.SparseAdam(list(table.parameters()), lr=LEARNING_RATE), torch.optim.Adam(list(linear.parameters()), lr=LEARNING_RATE)]
    target, target_val = torch.tensor(np.asarray(targets, dtype=np.float32)), torch.tensor(np.asarray(targets_val, dtype=np.float32))

    def forward(rows: list[list[int]]) -> torch.Tensor:
        rows = [r or [probe.tokenizer.token_to_id("[UNK]") or 0] for r in rows]
        flat = torch.tensor([i for r in rows for i in r])
        offsets = torch.tensor(np.cumsum([0] + [len(r) for r in rows[:-1]]))
        return torch.nn.functional.normalize(linear(table(flat, offsets)), dim=-1)

    report = DistilReport()
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    rng = np.random.default_rng(seed)
    stale = 0
    try:
        for _epoch in range(max_epochs):
            order = rng.permutation(len(ids))
            for start in range(0, len(order), BATCH_SIZE):
                batch = order[start : start + BATCH_SIZE]
                loss = (1.0 - (forward([ids[i] for i in batch]) * target[batch]).sum(dim=-1)).mean()
                for optimizer in optimizers:
                    optimizer.zero_grad()
                loss.backward()
                for optimizer in optimizers:
                    optimizer.step()
            with torch.no_grad():
                cosine = float((forward(ids_val) * target_val).sum(dim=-1).mean())
            report.epochs += 1
            report.val_cosine.append(cosine)
            if not np.isfinite(cosine):
                raise ValueError("distillation diverged (validation cosine is not finite)")
            if best is None or cosine > best[0]:
                with torch.no_grad():
                    folded = (table.weight @ linear.weight.T).numpy().copy()
                best, stale = (cosine, folded, linear.bias.detach().numpy().copy()), 0
            else:
                stale += 1
                if stale >= PATIENCE:
                    break
    finally:
        torch.set_num_threads(previous)
    assert best is not None
    report.best_val_cosine = best[0]
    report.seconds = time.perf_counter() - started
    return StaticEncoder(best[1], best[2], tokenizer_file), report
