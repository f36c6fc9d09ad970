"""``manage.py train_reader --dataset DIR [--out DIR] [--train-limit N] [--epochs N] [--lr X]``: fit the extractive answer's reader.

The work is ``evaluation.reader.train_reader``; it writes to ``VAR_DIR/models/reader`` unless told ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from experts.ml.reader import LEARNING_RATE


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # a training job needs no URL or admin checks
    help = "Fine-tune the cross-encoder reader on a dataset's train answers and measure it on validation and test against the sentence scorer."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="folder with docs.jsonl, qrels.jsonl and queries.jsonl whose rows carry 'answer'")
        parser.add_argument("--out", default=None, help="folder to write the reader to (default: VAR_DIR/models/reader, where the extractive answer reads it)")
        parser.add_argument("--train-limit", type=int, default=None, help="train questions (stratified by domain; default: all)")
        parser.add_argument("--epochs", type=int, default=1)
        parser.add_argument("--lr", type=float, default=LEARNING_RATE, help=f"AdamW's peak learning rate for the layers (default {LEARNING_RATE})")

    def handle(self, *args, **options):
        import torch
        from django.conf import settings

        from encoders.model_files import resolve_model_path
        from evaluation.reader import train_reader
        from experts.generation.extractive import reader_dir

        torch.set_num_threads(max(1, settings.TORCH_THREADS))
        dataset = Path(options["dataset"])
        if not (dataset / "queries.jsonl").is_file():
            raise CommandError(f"{dataset} has no queries.jsonl")
        try:
            report = train_reader(dataset, Path(options["out"]) if options["out"] else reader_dir(), resolve_model_path(settings.EMBEDDING_MODEL),
                                  train_limit=options["train_limit"], epochs=options["epochs"], lr=options["lr"], say=self.stdout.write)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(report["figures"], indent=1))
