"""The reader: a cross-encoder that reads the question and a candidate sentence together and scores how well it answers.

The sentence scorer (``sentence_scorer``) sees a sentence only through a few features; the reader reads
the words. It is sentence-transformers' ``CrossEncoder`` (one logit) made from the shipped MiniLM's first
``LAYERS`` layers, its head reading the mean of the pair's token states (``_mean_pooler``: on the
classification token every pair got the same logit and the first readers never learnt), plus a learnt
prior for each place in the scorer's order (``RANK_PRIOR``). It is fine-tuned (``fit_reader``) on doc2dial's
train questions, each with the scorer's shortlist of candidate sentences, by a listwise objective: a softmax
over the shortlist's logits against a softmax of each sentence's token F1 with the gold answer
(``TEMPERATURE``); the loss to compare with is that target's entropy (~0.78 over six sentences), not ln 6.
The extractive answer lets it re-order the scorer's first sentences (``extractive.READER_SHORTLIST``).

Only what was trained is saved (the layers, pooler and head in float16, ~11 MB, the prior, and ``reader.json`` of
its provenance and validation and test figures); the embeddings come from the base model's own folder.
``manage.py train_reader`` writes them; the extractive answer serves a reader only where its own figures
say it beats the scorer on validation (``wins_on_validation``). On doc2dial's gold-document candidates it
passes, barely (pick F1 0.3705 against 0.365 on validation at two sentences, 0.362 against 0.358 on test;
docs/EVALUATIONS.md): it learns the scorer's order and a little more. No trained reader is in the repository.
"""

from __future__ import annotations

import json
import math
import threading
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
# AdamW's peak rates: the layers at ``LEARNING_RATE``, the new head (pooler and classifier) faster, and the per-place
# prior (``RANK_PRIOR``) fastest. Set from short runs on 800-2,340 doc2dial train questions, judged on validation
# (docs/EVALUATIONS.md): at 4e-5 for everything the first readers' loss never left ln(6).
LEARNING_RATE, HEAD_LEARNING_RATE, PRIOR_LEARNING_RATE = 1e-4, 1e-3, 1e-2
# The reader is given the scorer's first sentences in the scorer's order, and it learns a logit for each place (the
# first ``RANK_PRIOR``; later places share the last): the scorer's order is evidence the words alone do not carry,
# and the reader then starts from the scorer's choice instead of against it.
RANK_PRIOR = 6
RANK_BIAS_KEY = "reader.rank_bias"


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
    pooler = _mean_pooler(model.base_model.pooler.dense)
    model.base_model.pooler = pooler
    model.base_model.register_forward_pre_hook(pooler.take_mask, with_kwargs=True)
    return encoder


def _mean_pooler(dense: Any) -> Any:
    """Stands in for BERT's pooler: the mean of the pair's token states (the padding left out), through the pooler's
    own dense layer and tanh, where BERT's reads the classification token alone. MiniLM was trained to be
    mean-pooled and leaves that token nearly the same for every input, so a head on it starts with the same logit
    for every pair (-0.040 ± 0.0001 over 24 doc2dial pairs) and its gradient hardly reaches the layers (1e-4 at the
    first layer's query): the first readers never left that plateau. The attention mask comes from a hook on the
    encoder's call (``take_mask``); ``SentenceReader.score`` serialises its calls for it."""
    import torch

    class MeanPooler(torch.nn.Module):
        def __init__(self, dense: torch.nn.Module):
            super().__init__()
            self.dense, self.activation, self.mask = dense, torch.nn.Tanh(), None

        def take_mask(self, module: Any, args: tuple, kwargs: dict) -> None:
            self.mask = kwargs.get("attention_mask")

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            mask = torch.ones(hidden.shape[:2], dtype=hidden.dtype) if self.mask is None else self.mask.to(hidden.dtype)
            pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            return self.activation(self.dense(pooled))

    return MeanPooler(dense)


class SentenceReader:
    """Scores (question, sentence) pairs: higher reads as a better answer (logits, comparable within a question)."""

    def __init__(self, model: Any, tokenizer: Any, report: dict[str, Any] | None = None, rank_bias: np.ndarray | None = None):
        self.model, self.tokenizer, self.report = model.eval(), tokenizer, report or {}
        self.rank_bias = np.zeros(RANK_PRIOR, dtype=np.float32) if rank_bias is None else np.asarray(rank_bias, dtype=np.float32)
        self._lock = threading.Lock()  # the pooler holds the call's attention mask (``_mean_pooler``)

    def score(self, question: str, sentences: Sequence[str]) -> np.ndarray:
        """Each sentence's logit plus its place's learnt prior (``rank_bias``): ``sentences`` come in the scorer's order."""
        import torch

        if not sentences:
            return np.zeros(0)
        tokens = self.tokenizer([question] * len(sentences), list(sentences), padding=True, truncation="longest_first",
                                max_length=MAX_LENGTH, return_tensors="pt")
        with self._lock, torch.inference_mode():
            logits = self.model(**tokens).logits[:, 0].float().numpy()
        return logits + _prior(self.rank_bias, len(sentences))

    def save(self, folder: Path, report: dict[str, Any]) -> None:
        """The trained tensors (everything but the embeddings, float16) and ``report``, written whole or not at all."""
        import torch
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in self.model.state_dict().items() if ".embeddings." not in k}
        tensors[RANK_BIAS_KEY] = torch.tensor(self.rank_bias, dtype=torch.float32)
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
        tensors = load_file(str(folder / WEIGHTS))
        rank_bias = tensors.pop(RANK_BIAS_KEY, None)
        missing, unexpected = encoder.model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
        if unexpected or any(".embeddings." not in k for k in missing):
            raise ValueError(f"{folder / WEIGHTS} does not fit {base_path}: missing {missing[:3]}, unexpected {unexpected[:3]}")
        model = encoder.model.eval()
        if int8:
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        return cls(model, encoder.tokenizer, json.loads((folder / META).read_text()), None if rank_bias is None else rank_bias.numpy())


def fit_reader(groups: Sequence[ReaderGroup], base_path: str, *, epochs: int = 1, lr: float = LEARNING_RATE, questions_per_step: int = 4,
               seed: int = 0, say: Callable[[str], Any] = print) -> SentenceReader:
    """Fine-tune the reader from the base model on ``groups`` (those with one sentence at least partly right and a choice
    to make; each group's sentences in the scorer's order).

    Listwise: each question's logits plus the place prior are softmaxed over its sentences and pulled towards
    softmax(F1 / ``TEMPERATURE``); AdamW (``lr`` for the layers, ``HEAD_LEARNING_RATE`` for the pooler and classifier,
    ``PRIOR_LEARNING_RATE`` for the prior) with a linear warm-up (a tenth of the steps) and decay; the embeddings stay
    frozen (they are not shipped). Raises ValueError when no group can teach anything.
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
    head = [p for n, p in model.named_parameters() if p.requires_grad and ("pooler" in n or "classifier" in n)]
    layers = [p for n, p in model.named_parameters() if p.requires_grad and not ("pooler" in n or "classifier" in n)]
    prior = torch.zeros(RANK_PRIOR, requires_grad=True)
    steps = max(1, math.ceil(len(usable) * epochs / questions_per_step))
    warm = max(1, steps // 10)
    optimizer = torch.optim.AdamW([{"params": layers, "lr": lr}, {"params": head, "lr": HEAD_LEARNING_RATE},
                                   {"params": [prior], "lr": PRIOR_LEARNING_RATE, "weight_decay": 0.0}], weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (steps - s) / steps))
    places = [min(i, RANK_PRIOR - 1) for i in range(max(len(g.sentences) for g in usable))]
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
                n = len(g.sentences)
                target = torch.softmax(torch.tensor(np.asarray(g.labels, dtype=np.float32)) / TEMPERATURE, dim=0)
                loss = loss - (target * torch.log_softmax(logits[offset:offset + n] + prior[places[:n]], dim=0)).sum()
                offset += n
            (loss / len(batch)).backward()
            torch.nn.utils.clip_grad_norm_(layers + head, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            running.append(float(loss.detach()) / len(batch))
            if step % 50 == 0 or step == steps:
                say(f"  reader step {step}/{steps}: loss {np.mean(running[-50:]):.4f} ({time.monotonic() - started:.0f} s)")
    target_entropy = float(np.mean([_entropy(g.labels) for g in usable]))
    return SentenceReader(model, tokenizer, {"questions": len(usable), "steps": steps, "epochs": epochs, "lr": lr, "head_lr": HEAD_LEARNING_RATE,
                                             "layers": LAYERS, "final_loss": round(float(np.mean(running[-50:])), 4),
                                             "target_entropy": round(target_entropy, 4), "train_s": round(time.monotonic() - started, 1)},
                          prior.detach().numpy())


def _entropy(labels: np.ndarray) -> float:
    """The entropy of softmax(labels / ``TEMPERATURE``): the lowest loss a group can reach (its uniform guess: ln n)."""
    z = np.asarray(labels, dtype=np.float64) / TEMPERATURE
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(-(p * np.log(np.clip(p, 1e-12, None))).sum())


def _prior(rank_bias: np.ndarray, n: int) -> np.ndarray:
    """The learnt prior of the first ``n`` places; places past ``RANK_PRIOR`` get the last place's."""
    return np.asarray([rank_bias[min(i, len(rank_bias) - 1)] for i in range(n)], dtype=np.float32)


def wins_on_validation(report: dict[str, Any], shortlist: int) -> bool:
    """Whether a reader's report (``reader.json``) shows it re-ordering the scorer's first ``shortlist`` sentences to a
    better pick on the validation split than the scorer's own (``evaluation.reader.reader_figures``): a higher pick F1
    and a pick that is the best sentence more often, both."""
    val = report.get("figures", {}).get("val", {})
    read, scorer = val.get("reader", {}).get(str(shortlist), {}), val.get("scorer", {})
    return all(read.get(k) is not None and read[k] > scorer.get(k, float("inf")) for k in ("picked_f1", "pick_is_best"))


def pick(scorer_order: Sequence[int], reader_scores: np.ndarray | None, shortlist: int) -> int:
    """The candidate chosen: the reader's best among the scorer's first ``shortlist`` (``scorer_order``: candidates best
    first), or the scorer's first where there is no reader or no choice to make."""
    head = list(scorer_order[:shortlist])
    if reader_scores is None or len(head) < 2:
        return head[0]
    return head[int(np.argmax(np.asarray(reader_scores)[: len(head)]))]
