"""The reader: a cross-encoder that reads the question and a candidate sentence together and scores how well it answers.

The sentence scorer (``sentence_scorer``) sees a sentence only through a few features; the reader reads
the words. It is sentence-transformers' ``CrossEncoder`` (one logit) made from the shipped MiniLM's first
``LAYERS`` layers and fine-tuned (``fit_reader``) on doc2dial's train questions, each with the scorer's
shortlist of candidate sentences, by a listwise objective: a softmax over the shortlist's logits against
a softmax of each sentence's token F1 with the gold answer (``TEMPERATURE``). The extractive answer lets it
re-order the scorer's first sentences (``extractive.READER_SHORTLIST``).

Only what was trained is saved (the layers, pooler and head in float16, ~11 MB, with ``reader.json`` of its
provenance and validation and test figures); the embeddings come from the base model's own folder.
``manage.py train_reader`` writes them; the extractive answer serves a reader only where its own figures
say it beats the scorer on validation (``wins_on_validation``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS, META = "weights.safetensors", "reader.json"
# The first 3 of MiniLM's 6 layers: the cross-encoder reads every (question, sentence) pair at answer time, and
# 6 layers took ~150 ms (int8) for five pairs on this 2-core machine under load, 3 layers ~60 ms (docs/EVALUATIONS.md).
LAYERS = 3
MAX_LENGTH = 128  # tokens of question and sentence together (doc2dial's pairs: ~50)
# The sharpness of the target over a shortlist: softmax(F1 / TEMPERATURE) puts most of the weight on the best
# sentence while a near-best one still counts. Set, not tuned.
TEMPERATURE = 0.1


@dataclass
class ReaderGroup:
    """One question and the sentences the reader chooses among, with each one's token F1 against the gold answer."""

    question: str
    sentences: list[str]
    labels: np.ndarray


def _cross_encoder(base_path: str) -> Any:
    """A CrossEncoder (one logit) from the base model's folder, cut to its first ``LAYERS`` layers; never downloads."""
    import logging

    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as transformers_logging

    # "Converting SentenceTransformer model to CrossEncoder" and the head missing from the base model's weights: expected.
    quiet = logging.getLogger("sentence_transformers")
    level, verbosity = quiet.level, transformers_logging.get_verbosity()
    quiet.setLevel(logging.ERROR)
    transformers_logging.set_verbosity_error()
    try:
        encoder = CrossEncoder(base_path, num_labels=1, max_length=MAX_LENGTH, device="cpu", local_files_only=True)
    finally:
        quiet.setLevel(level)
        transformers_logging.set_verbosity(verbosity)
    model = encoder.model
    model.base_model.encoder.layer = model.base_model.encoder.layer[:LAYERS]
    model.config.num_hidden_layers = LAYERS
    return encoder


class SentenceReader:
    """Scores (question, sentence) pairs: higher reads as a better answer (logits, comparable within a question)."""

    def __init__(self, model: Any, tokenizer: Any, report: dict[str, Any] | None = None):
        self.model, self.tokenizer, self.report = model.eval(), tokenizer, report or {}

    def score(self, question: str, sentences: Sequence[str]) -> np.ndarray:
        import torch

        if not sentences:
            return np.zeros(0)
        tokens = self.tokenizer([question] * len(sentences), list(sentences), padding=True, truncation="longest_first",
                                max_length=MAX_LENGTH, return_tensors="pt")
        with torch.inference_mode():
            return self.model(**tokens).logits[:, 0].float().numpy()

    def save(self, folder: Path, report: dict[str, Any]) -> None:
        """The trained tensors (everything but the embeddings, float16) and ``report``, written whole or not at all."""
        import torch
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in self.model.state_dict().items() if ".embeddings." not in k}
        save_file(tensors, str(folder / (WEIGHTS + ".partial")))
        (folder / (META + ".partial")).write_text(json.dumps(report, indent=1) + "\n")
        (folder / (WEIGHTS + ".partial")).replace(folder / WEIGHTS)
        (folder / (META + ".partial")).replace(folder / META)

    @classmethod
    def load(cls, folder: Path, base_path: str, *, int8: bool = True, threads: int = 1) -> SentenceReader:
        """The reader saved in ``folder`` on the base model at ``base_path`` (FileNotFoundError when it is absent);
        ``int8``: its linear layers quantised dynamically (what the extractive answer serves)."""
        import torch
        from safetensors.torch import load_file

        if not (folder / WEIGHTS).is_file() or not (folder / META).is_file():
            raise FileNotFoundError(f"no reader in {folder}")
        torch.set_num_threads(max(1, threads))
        encoder = _cross_encoder(base_path)
        missing, unexpected = encoder.model.load_state_dict({k: v.float() for k, v in load_file(str(folder / WEIGHTS)).items()}, strict=False)
        if unexpected or any(".embeddings." not in k for k in missing):
            raise ValueError(f"{folder / WEIGHTS} does not fit {base_path}: missing {missing[:3]}, unexpected {unexpected[:3]}")
        model = encoder.model.eval()
        if int8:
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        return cls(model, encoder.tokenizer, json.loads((folder / META).read_text()))


def fit_reader(groups: Sequence[ReaderGroup], base_path: str, *, epochs: int = 1, lr: float = 4e-5, questions_per_step: int = 4,
               seed: int = 0, say: Callable[[str], Any] = print) -> SentenceReader:
    """Fine-tune the reader from the base model on ``groups`` (those with one sentence at least partly right and a choice to make).

    Listwise: each question's logits are softmaxed over its sentences and pulled towards softmax(F1 / ``TEMPERATURE``);
    AdamW with a linear warm-up (a tenth of the steps) and decay; the embeddings stay frozen (they are not shipped).
    Raises ValueError when no group can teach anything.
    """
    import torch

    usable = [g for g in groups if len(g.sentences) > 1 and float(np.max(g.labels)) > 0]
    if not usable:
        raise ValueError("no question has two candidate sentences and one with some of its answer")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    encoder = _cross_encoder(base_path)
    model, tokenizer = encoder.model.train(), encoder.tokenizer
    for p in model.base_model.embeddings.parameters():
        p.requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    steps = max(1, math.ceil(len(usable) * epochs / questions_per_step))
    warm = max(1, steps // 10)
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (steps - s) / steps))
    started, step, running = time.monotonic(), 0, []
    for _ in range(epochs):
        order = rng.permutation(len(usable))
        for start in range(0, len(order), questions_per_step):
            batch = [usable[i] for i in order[start:start + questions_per_step]]
            tokens = tokenizer([g.question for g in batch for _ in g.sentences], [s for g in batch for s in g.sentences], padding=True,
                               truncation="longest_first", max_length=MAX_LENGTH, return_tensors="pt")
            logits = model(**tokens).logits[:, 0]
            loss, offset = torch.zeros(()), 0
            for g in batch:
                target = torch.softmax(torch.tensor(np.asarray(g.labels, dtype=np.float32)) / TEMPERATURE, dim=0)
                loss = loss - (target * torch.log_softmax(logits[offset:offset + len(g.sentences)], dim=0)).sum()
                offset += len(g.sentences)
            (loss / len(batch)).backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            running.append(float(loss.detach()) / len(batch))
            if step % 50 == 0 or step == steps:
                say(f"  reader step {step}/{steps}: loss {np.mean(running[-50:]):.4f} ({time.monotonic() - started:.0f} s)")
    return SentenceReader(model, tokenizer, {"questions": len(usable), "steps": steps, "epochs": epochs, "lr": lr, "layers": LAYERS,
                                             "train_s": round(time.monotonic() - started, 1)})


def wins_on_validation(report: dict[str, Any], shortlist: int) -> bool:
    """Whether a reader's report (``reader.json``) shows it re-ordering the scorer's first ``shortlist`` sentences to a
    better pick on the validation split than the scorer's own (``evaluation.reader.reader_figures``)."""
    val = report.get("figures", {}).get("val", {})
    read = val.get("reader", {}).get(str(shortlist), {}).get("picked_f1")
    return read is not None and read > val.get("scorer", {}).get("picked_f1", float("inf"))


def pick(scorer_order: Sequence[int], reader_scores: np.ndarray | None, shortlist: int) -> int:
    """The candidate chosen: the reader's best among the scorer's first ``shortlist`` (``scorer_order``: candidates best
    first), or the scorer's first where there is no reader or no choice to make."""
    head = list(scorer_order[:shortlist])
    if reader_scores is None or len(head) < 2:
        return head[0]
    return head[int(np.argmax(np.asarray(reader_scores)[: len(head)]))]
