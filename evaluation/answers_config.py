"""What one ``manage.py evaluate answers`` run does: its options (``AnswerConfig``), modes, generators and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODES = ("flat", "auto", "oracle", "fast")
DEFAULT_MODES = ("flat", "auto", "oracle")  # "fast" (auto:fast with the fast tier) on request: it trains the tier
GENERATORS = ("extractive", "base", "lora")
BATCH_SIZE = 8
SEED = 0  # of every sample, router and adapter training of a run

# The default run (chosen to fit ~45 minutes on a shared 2-core CPU, see docs/EVALUATIONS.md): a stratified
# sample of the test questions, and the training steps below. The steps were chosen on doc2dial's
# validation split (`--split val --modes auto --generators extractive,lora`, 120 questions): routed
# LoRA F1 0.159 with 40 + 10 steps, 0.206 with 80 + 20 (extractive 0.195): the adapters were
# undertrained. Measured again with select decoding on all 417 validation questions (2026-12-05,
# `--split val --limit 0 --modes auto --generators lora`): 0.3299 with 80 + 20, 0.3263 with 160 + 40.
# Adapters are cached by fingerprint, so a rerun pays for generation only.
DEFAULT_LIMIT = 120
DEFAULT_POOLED_STEPS = 80
DEFAULT_EXPERT_STEPS = 20

Say = Callable[[str], Any]


@dataclass
class AnswerConfig:
    """What one ``evaluate answers`` run does (the command's options)."""

    limit: int | None = DEFAULT_LIMIT
    train_limit: int | None = None
    split: str = "test"
    generators: tuple[str, ...] = GENERATORS
    modes: tuple[str, ...] = DEFAULT_MODES
    pooled_steps: int = DEFAULT_POOLED_STEPS
    expert_steps: int = DEFAULT_EXPERT_STEPS  # 0: no continuation (experts and generalist are the pooled adapter)
    lora: dict[str, Any] = field(default_factory=dict)  # LoraParams fields over the product's (for choosing them on val)
    max_new_tokens: int | None = None  # None: GENERATOR_MAX_TOKENS, as serving
    batch_size: int = BATCH_SIZE
    dtype: str = "auto"  # auto: serving's (GENERATION_DTYPE)
    answers_path: str | None = None  # where to write every question's answers (JSON lines, ``answer_rows``)
