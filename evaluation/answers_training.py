"""The adapters of an answers run, trained on the train split as the product trains them: a pooled adapter, one
expert per domain continuing from it, and the generalist with the experts' total steps; cached by fingerprint."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.answers_config import SEED, AnswerConfig, Say
from evaluation.answers_corpus import Corpus, search_passages
from evaluation.answers_generation import Serving
from evaluation.answers_scoring import rounded
from evaluation.datasets import code_fingerprint, embedding_cache_dir, stratified_sample
from experts.ml.targets import gold_target

HELD_OUT = 8  # val examples per adapter for its held-out loss (the loss is a by-product; F1 is the figure)


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _base_model_identity(base_model: str) -> dict[str, Any]:
    from experts.ml.loading import resolve_base_model

    folder = Path(resolve_base_model(base_model))
    return {"config": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:16],
            "weights": sorted((p.name, p.stat().st_size) for p in folder.glob("*.safetensors"))}


class _Adapters:
    """Trains adapters through ``lora.train_lora`` once per fingerprint and keeps their records.

    The fingerprint covers the base model, the parameters, the token ids the adapter learns from
    (so a change of the prompt builder is a miss, not a stale adapter), the adapter it starts from
    and the training code.
    """

    def __init__(self, base_model: str, tokenizer: Any, say: Say):
        from experts.ml import loading, lora, lora_examples

        self.base_model, self.tokenizer, self.say = base_model, tokenizer, say
        self.root = embedding_cache_dir().parent / "answers" / "adapters"
        self.identity = {"base": _base_model_identity(base_model), "code": code_fingerprint(lora, lora_examples, loading)}
        self.records: dict[str, dict[str, Any]] = {}
        self.train_s_now = 0.0

    def train(self, label: str, examples: list[Any], held_out: list[Any], params: Any, init: Path | None = None) -> Path:
        from experts.ml.lora import train_lora
        from experts.ml.lora_examples import encode_example

        data = hashlib.sha256(json.dumps([encode_example(self.tokenizer, e, params.max_length) for e in examples]).encode()).hexdigest()
        key = _fingerprint(self.identity, params.as_dict(), data, init.name if init else None)
        folder = self.root / f"{label}-{key}"
        record_path = folder / "record.json"
        if record_path.is_file():
            self.records[label] = json.loads(record_path.read_text())
            self.say(f"  adapter {label}: cached ({folder.name})")
            return folder
        self.say(f"  adapter {label}: training {params.max_steps} steps on {len(examples)} examples" + (f" from {init.name}" if init else ""))
        t0 = last = time.perf_counter()

        def on_step(step: int, total: int, loss: float) -> None:
            nonlocal last
            if step == total or time.perf_counter() - last > 60:
                last = time.perf_counter()
                self.say(f"    {label}: step {step}/{total}, loss {loss:.3f}, {last - t0:.0f} s")

        work = Path(tempfile.mkdtemp(prefix=f"answers-{label}-"))
        result = train_lora(self.base_model, examples, held_out, params, folder, work, on_step=on_step, init_adapter=init)
        seconds = time.perf_counter() - t0
        self.train_s_now += seconds
        self.records[label] = {
            "label": label, "fingerprint": key, "steps": result.steps, "n_train": len(examples), "train_s": round(seconds, 1),
            "train_loss": rounded(result.train_loss), "held_out_loss": rounded(result.eval_loss), "base_held_out_loss": rounded(result.base_eval_loss),
            "started_from": init.name if init else None, "loss_curve": result.loss_curve,
        }
        record_path.write_text(json.dumps(self.records[label], indent=2))
        return folder


def _training_examples(corpus: Corpus, queries: list[dict[str, Any]], qx: np.ndarray, rows: list[int], y: np.ndarray, tokenizer: Any,
                       params: Any, serving: Serving, top_k: int) -> tuple[dict[int, list[Any]], dict[str, int]]:
    """Examples per domain the way ``labeling.grounding`` builds them: own-domain search, weak skipped, gold answer cited.

    The prompt holds the passages serving would show for that search (``Serving.shown``); the
    target cites the one holding the gold answer among those that fit ``max_length``.
    """
    from experts.ml.lora_examples import Example, fitted_passages

    out: dict[int, list[Any]] = defaultdict(list)
    counts = {"questions": len(rows), "weak": 0, "unsupported": 0, "kept": 0}
    for i in rows:
        question, answer = queries[i]["text"], " ".join(str(queries[i].get("answer") or "").split())
        passages = search_passages(corpus, {corpus.names[y[i]]: 1.0}, qx[i], question, top_k)
        if not answer:
            counts["unsupported"] += 1
            continue
        if serving.weak(passages):
            counts["weak"] += 1
            continue
        shown = serving.shown(question, passages)
        answer_room = len(tokenizer(answer, add_special_tokens=False)["input_ids"]) + 6  # the marker and the end token
        fit = fitted_passages(tokenizer, Example(question, answer, shown), params.max_length - answer_room)
        target = gold_target(answer, shown[:fit])
        if target is None:
            counts["unsupported"] += 1
            continue
        out[int(y[i])].append(Example(question, target, shown, whole=passages[: serving.generator.max_passages]))
        counts["kept"] += 1
    return out, counts


def _lora_params(config: AnswerConfig) -> Any:
    """The product's training parameters (``LoraParams``' defaults, QLoRA and bfloat16 as the settings say), with the run's overrides."""
    from django.conf import settings

    from experts.ml.lora import LoraParams

    return LoraParams.from_dict({**LoraParams(qlora=settings.LORA_QLORA, bf16=settings.LORA_BF16, seed=SEED).as_dict(), **config.lora})


def _with_steps(params: Any, steps: int) -> Any:
    from experts.ml.lora import LoraParams

    return LoraParams.from_dict({**params.as_dict(), "max_steps": max(1, steps)})


def train_adapters(config: AnswerConfig, ctx: dict[str, Any], tokenizer: Any, serving: Serving, say: Say) -> tuple[dict[str, Path], dict[str, Any]]:
    """Pooled adapter, one expert per domain continuing from it, and the generalist with the experts' total steps."""
    from django.conf import settings

    corpus, queries, qx, y = ctx["corpus"], ctx["queries"], ctx["qx"], ctx["y"]
    params = _lora_params(config)
    rows = list(ctx["train_rows"])
    if config.train_limit is not None and config.train_limit < len(rows):
        rows = [rows[j] for j in stratified_sample([str(y[i]) for i in rows], config.train_limit, seed=SEED)]
    by_domain, counts = _training_examples(corpus, queries, qx, rows, y, tokenizer, params, serving, ctx["top_k"])
    held, _ = _training_examples(corpus, queries, qx, list(ctx["val_rows"]), y, tokenizer, params, serving, ctx["top_k"])
    pooled = [e for d in sorted(by_domain) for e in by_domain[d]]
    pooled_held = [e for d in sorted(held) for e in held[d][: max(1, HELD_OUT // len(corpus.domains))]]
    say(f"  training examples: {counts} ({', '.join(f'{corpus.domains[d]} {len(v)}' for d, v in sorted(by_domain.items()))})")
    trainer = _Adapters(settings.BASE_MODEL, tokenizer, say)
    steps = {"pooled": config.pooled_steps, "expert": config.expert_steps, "generalist": config.expert_steps * len(by_domain)}
    start = trainer.train("pooled", pooled, pooled_held, _with_steps(params, config.pooled_steps))
    folders: dict[str, Path] = {}
    for d in sorted(by_domain):
        folders[corpus.domains[d]] = start if not config.expert_steps else trainer.train(
            f"expert-{corpus.domains[d]}", by_domain[d], held.get(d, [])[:HELD_OUT], _with_steps(params, config.expert_steps), init=start)
    if "flat" in config.modes:  # only the flat mode answers with the generalist
        folders["generalist"] = start if not config.expert_steps else trainer.train(
            "generalist", pooled, pooled_held, _with_steps(params, steps["generalist"]), init=start)
    report = {
        "steps": steps, "params": params.as_dict(), "records": trainer.records, "examples": counts, "n_train": len(pooled),
        "n_train_by_domain": {corpus.domains[d]: len(v) for d, v in sorted(by_domain.items())},
        "train_s": round(sum(r["train_s"] for r in trainer.records.values()), 1), "train_s_this_run": round(trainer.train_s_now, 1),
    }
    return folders, report
