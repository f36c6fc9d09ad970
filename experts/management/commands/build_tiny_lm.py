"""``manage.py build_tiny_lm [--out DIR]``: a random-weight test model for the transformers/vLLM backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from experts.ml.base_model import PROVENANCE_FILE
from experts.ml.tiny_lm import build_tiny_lm


class Command(BaseCommand):
    help = (
        "Build a tiny Llama-architecture causal LM with random weights and a tokenizer trained on the demo documents, "
        "saved in $VAR_DIR/models/tiny-lm (default) or --out. It answers nonsense: it exists to exercise adapters, "
        "training and serving quickly; point BASE_MODEL at it to use it. The real base model comes from prepare_base_model."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--out", default="", help="Folder to write (default: $VAR_DIR/models/tiny-lm).")
        parser.add_argument("--vocab-size", type=int, default=2000)
        parser.add_argument("--hidden-size", type=int, default=64)
        parser.add_argument("--layers", type=int, default=2)
        parser.add_argument("--heads", type=int, default=4)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        # Not BASE_MODEL: that is the real model now, and random weights written over it would pass for it.
        out = Path(options["out"]) if options["out"] else Path(settings.VAR_DIR) / "models" / "tiny-lm"
        if out.exists() and any(out.iterdir()) and not (out / "config.json").is_file():
            raise CommandError(f"{out} exists and is not a model folder; choose another --out")
        if (out / PROVENANCE_FILE).is_file():
            raise CommandError(f"{out} holds the base model converted by prepare_base_model; choose another --out")
        texts = []
        for path in sorted((Path(settings.DEMO_DIR) / "documents").glob("*.jsonl")):
            texts += [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not texts:
            raise CommandError(f"no demo documents under {settings.DEMO_DIR}/documents to train the tokenizer on")
        build_tiny_lm(out, texts, vocab_size=options["vocab_size"], hidden_size=options["hidden_size"],
                      layers=options["layers"], heads=options["heads"], seed=options["seed"])
        self.stdout.write(f"tiny model written to {out} (set BASE_MODEL={out} to use it elsewhere)")
