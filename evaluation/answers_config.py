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

# The default run (chosen to fit ~45 minutes on a shared 2-core CPU): a stratified sample of the test
# questions, and the training steps below, chosen on doc2dial's validation split (fewer undertrain the
# adapters, more do not help; figures in docs/EVALUATIONS.md). Adapters are cached by fingerprint, so a
# rerun pays for generation only.
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
