"""LoRA adapters for one shared causal LM: training with checkpoints and resume, the held-out evaluation, saving.

Pure ML code (torch, transformers, peft): ``experts.services`` turns rows into ``Example``s and
``LoraParams`` and records the result. A plain loop rather than ``Trainer`` keeps the resume contract
small: every ``checkpoint_steps`` the adapter, optimiser, scheduler, step and loss curve are written
atomically to ``work_dir/checkpoint``, and the data order is a function of the seed and the epoch.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .loading import ADAPTER_META, bf16_native, device, load_base, qlora_available
from .lora_errors import LoraError, TrainingOutOfMemory
from .lora_examples import IGNORE_INDEX, Example, check_examples, collate, encode_example

CHECKPOINT = "checkpoint"

# The fewest training examples an adapter training accepts (a floor, not a tuned figure).
MIN_EXAMPLES = 8


@dataclass
class LoraParams:
    """Hyper-parameters of one adapter training (stored on the ExpertVersion).

    The defaults are the product's: the console's form and ``manage.py train_adapter`` start from them
    (``qlora`` and ``bf16`` from the ``LORA_QLORA`` and ``LORA_BF16`` settings, which depend on the
    hardware). docs/CONFIGURATION.md says how they were chosen for SmolLM2-135M on a CPU.
    """

    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    epochs: float = 3.0
    learning_rate: float = 1e-3
    batch_size: int = 4
    max_length: int = 640
    checkpoint_steps: int = 50  # a restarted job resumes from the last checkpoint
    max_steps: int = 0  # 0: epochs decide
    seed: int = 0
    qlora: bool = True  # used only where a GPU and bitsandbytes are present
    # The frozen base model's weights in bfloat16 where the hardware multiplies it natively (CUDA, or a
    # CPU with AMX / AVX512-BF16); the adapter and its optimiser stay float32. Elsewhere: float32.
    bf16: bool = True
    # Adapt only the last ``top_layers`` transformer layers (0: all). Backpropagation then stops there,
    # so a step costs a forward pass plus the backward of those layers only.
    top_layers: int = 10

    def validate(self) -> LoraParams:
        problems = []
        if not 1 <= self.rank <= 256:
            problems.append("rank must be between 1 and 256")
        if self.alpha <= 0:
            problems.append("alpha must be positive")
        if not 0.0 <= self.dropout < 1.0:
            problems.append("dropout must be in [0, 1)")
        if not self.target_modules or not all(isinstance(m, str) and m.strip() for m in self.target_modules):
            problems.append("target_modules must name at least one module (e.g. q_proj, v_proj)")
        if self.epochs <= 0 and self.max_steps <= 0:
            problems.append("epochs (or max_steps) must be positive")
        if not 0 < self.learning_rate < 1:
            problems.append("learning_rate must be in (0, 1)")
        if not 1 <= self.batch_size <= 512:
            problems.append("batch_size must be between 1 and 512")
        if not 16 <= self.max_length <= 32768:
            problems.append("max_length must be between 16 and 32768 tokens")
        if self.checkpoint_steps < 1:
            problems.append("checkpoint_steps must be at least 1")
        if self.top_layers < 0:
            problems.append("top_layers must be 0 (every layer) or a positive number of layers")
        if problems:
            raise LoraError("; ".join(problems))
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraParams:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if isinstance(known.get("target_modules"), str):
            known["target_modules"] = [m.strip() for m in known["target_modules"].split(",") if m.strip()]
        return cls(**known).validate()


@dataclass
class TrainResult:
    """What a training produced: the adapter folder and the figures to compare versions by."""

    adapter_dir: Path
    steps: int
    train_loss: float
    eval_loss: float | None
    eval_perplexity: float | None
    base_eval_loss: float | None  # the same held-out loss without the adapter: what training gained
    loss_curve: list[dict[str, float]]
    resumed_from: int


StepCallback = Callable[[int, int, float], None]  # (step, total steps, loss)


# --- training ---------------------------------------------------------------------------------


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _atomic_dir_swap(tmp: Path, final: Path) -> None:
    """Replace ``final`` by ``tmp`` (both on one filesystem): the old one is moved aside first."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def _save_checkpoint(work_dir: Path, model: Any, optimizer: Any, scheduler: Any, step: int, curve: list[dict[str, float]]) -> None:
    import torch

    tmp = work_dir / f".{CHECKPOINT}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "trainer_state.pt")
    (tmp / "progress.json").write_text(json.dumps({"step": step, "loss_curve": curve}))
    _atomic_dir_swap(tmp, work_dir / CHECKPOINT)


def last_checkpoint_step(work_dir: str | Path) -> int:
    """The step of the checkpoint in ``work_dir`` (0 when there is none)."""
    progress = Path(work_dir) / CHECKPOINT / "progress.json"
    return json.loads(progress.read_text())["step"] if progress.is_file() else 0


def _load_checkpoint(work_dir: Path, model: Any, optimizer: Any, scheduler: Any) -> tuple[int, list[dict[str, float]]]:
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    ckpt = work_dir / CHECKPOINT
    if not (ckpt / "progress.json").is_file():
        return 0, []
    set_peft_model_state_dict(model, load_file(str(ckpt / "adapter_model.safetensors")))
    state = torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    progress = json.loads((ckpt / "progress.json").read_text())
    return int(progress["step"]), list(progress["loss_curve"])


def _base_loss(work_dir: Path, start: int, compute: Callable[[], float | None]) -> float | None:
    """The base model's held-out loss, measured before the first step and kept next to the checkpoints."""
    path = work_dir / "base_eval.json"
    if start > 0 and path.is_file():
        return json.loads(path.read_text())["loss"]
    loss = compute()
    path.write_text(json.dumps({"loss": loss}))
    return loss


def answer_loss(model: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """(summed cross-entropy, tokens) of the answer tokens of a collated batch.

    The vocabulary projection is computed only at the positions that predict an answer token
    (``logits_to_keep`` with the union of those positions over the batch): prompts are most of
    every sequence, and projecting them onto a 49k-token vocabulary was ~20% of a training step.
    """
    import torch

    labels = batch["labels"]
    predicts = labels[:, 1:] != IGNORE_INDEX  # position t predicts token t + 1
    keep = torch.nonzero(predicts.any(dim=0)).flatten()
    if keep.numel() == 0:
        return labels.new_zeros((), dtype=torch.float32), 0
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=keep).logits.float()
    targets = labels[:, keep + 1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, int((targets != IGNORE_INDEX).sum())


def evaluate_loss(model: Any, encoded: list[tuple[list[int], list[int]]], pad_id: int, batch_size: int) -> float | None:
    """Mean per-token loss of the answers in ``encoded`` (None when there is nothing to evaluate)."""
    import torch

    if not encoded:
        return None
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(encoded), batch_size):
            batch = {k: v.to(model.device) for k, v in collate(encoded[i : i + batch_size], pad_id).items()}
            loss, n = answer_loss(model, batch)
            total += float(loss)
            tokens += n
    model.train()
    return total / tokens if tokens else None


def train_lora(
    base_model: str,
    train: Sequence[Example],
    evaluation: Sequence[Example],
    params: LoraParams,
    out_dir: str | Path,
    work_dir: str | Path,
    *,
    on_step: StepCallback | None = None,
    min_examples: int = 1,
    threads: int | None = None,
) -> TrainResult:
    """Train a LoRA adapter on ``train``, evaluate it on ``evaluation``, save it to ``out_dir``.

    Args:
        base_model: local folder (or cached hub id) of the base causal LM.
        train, evaluation: the examples; ``evaluation`` may be empty (no held-out figures then).
        params: hyper-parameters (validated here).
        out_dir: the adapter's final folder; written to a temp sibling then renamed into place.
        work_dir: checkpoints of this training; a second call with the same ``work_dir`` resumes
            from its last checkpoint. Removed after success.
        on_step: called after every optimiser step (and after any checkpoint of that step) with
            (step, total steps, loss); an exception raised there stops training, and the next
            call resumes from the last checkpoint.
        min_examples: fewer training examples than this is refused.
        threads: torch CPU threads while training (restored afterwards); None leaves them as they are.

    Raises:
        LoraError: bad parameters or data; BaseModelNotFound; TrainingOutOfMemory.
    """
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        out, work = Path(out_dir), Path(work_dir)
        params.validate()
        check_examples(train, min_examples=min_examples)
        check_examples(evaluation, min_examples=0)
        work.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(params.seed)
        use_qlora = params.qlora and qlora_available()
        tokenizer, model = load_base(base_model, qlora=use_qlora, dtype=torch.bfloat16 if params.bf16 and not use_qlora and bf16_native() else None)
        if use_qlora:
            model = prepare_model_for_kbit_training(model)
        missing = [m for m in params.target_modules if not any(name.endswith(m) for name, _ in model.named_modules())]
        if missing:
            raise LoraError(f"target modules {missing} do not exist in {base_model!r}")
        layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        config = LoraConfig(
            r=params.rank, lora_alpha=params.alpha, lora_dropout=params.dropout,
            target_modules=list(params.target_modules), task_type="CAUSAL_LM",
            layers_to_transform=list(range(max(0, layers - params.top_layers), layers)) if params.top_layers and layers else None,
        )
        # The adapter's own weights stay float32 on a bfloat16 base (peft's autocast_adapter_dtype).
        model = get_peft_model(model, config)
        pad_id = tokenizer.pad_token_id
        encoded_train = [encode_example(tokenizer, e, params.max_length) for e in train]
        encoded_eval = [encode_example(tokenizer, e, params.max_length) for e in evaluation]
        steps_per_epoch = math.ceil(len(encoded_train) / params.batch_size)
        total = params.max_steps or max(1, math.ceil(params.epochs * steps_per_epoch))
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=params.learning_rate)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / total))
        start, curve = _load_checkpoint(work, model, optimizer, scheduler)
        # LoRA starts as the identity (B = 0), so before the first step this is the bare base model's loss.
        base_eval_loss = _base_loss(work, start, lambda: evaluate_loss(model, encoded_eval, pad_id, params.batch_size))
        model.train()
        loss_value = curve[-1]["loss"] if curve else float("nan")
        try:
            for step in range(start + 1, total + 1):
                epoch, index = divmod(step - 1, steps_per_epoch)
                batch_ids = _batches(len(encoded_train), params.batch_size, params.seed, epoch)[index]
                batch = {k: v.to(model.device) for k, v in collate([encoded_train[i] for i in batch_ids], pad_id).items()}
                summed, tokens = answer_loss(model, batch)
                loss = summed / max(1, tokens)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                loss_value = float(loss.detach())
                curve.append({"step": step, "loss": round(loss_value, 5)})
                if step % params.checkpoint_steps == 0 and step < total:
                    _save_checkpoint(work, model, optimizer, scheduler, step, curve)
                if on_step is not None:
                    on_step(step, total, loss_value)
            eval_loss = evaluate_loss(model, encoded_eval, pad_id, params.batch_size)
        except Exception as exc:
            if _is_oom(exc):
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                raise TrainingOutOfMemory(
                    f"out of memory while training on {device()}: lower batch_size ({params.batch_size}), "
                    f"max_length ({params.max_length}) or rank ({params.rank}), or enable QLoRA on a GPU"
                ) from None
            raise
        save_adapter(model, base_model, out, params)
        shutil.rmtree(work, ignore_errors=True)
        return TrainResult(
            adapter_dir=out,
            steps=total,
            train_loss=loss_value,
            eval_loss=eval_loss,
            eval_perplexity=math.exp(min(eval_loss, 50.0)) if eval_loss is not None else None,
            base_eval_loss=base_eval_loss,
            loss_curve=curve,
            resumed_from=start,
        )
    finally:
        torch.set_num_threads(previous)


def save_adapter(model: Any, base_model: str, out_dir: Path, params: LoraParams) -> None:
    """Write the adapter to a temp sibling of ``out_dir`` and rename it into place."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    (tmp / ADAPTER_META).write_text(json.dumps({"base_model": base_model, "params": params.as_dict()}, indent=2))
    _atomic_dir_swap(tmp, out_dir)
