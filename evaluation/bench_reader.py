"""``manage.py bench reader``: what the reader adds to an extractive answer, in milliseconds.

For doc2dial's first validation questions, the candidates ``train_reader`` measures on (``evaluation.reader
.gold_candidates``); each question's first ``extractive.READER_SHORTLIST`` sentences read by the trained reader (``VAR_DIR/models/reader``)
(int8, one torch thread, as served), timed one question at a time after a warm-up: the work
``extractive_answer`` adds over the sentence scorer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.reader import gold_candidates
from evaluation.workspace import Dataset
from experts.ml.extractive import READER_SHORTLIST

WARMUP = 3


def bench_reader(dataset: Path, questions: int = 100, say: Callable[[str], Any] = print) -> dict[str, Any]:
    """p50 / p90 / mean milliseconds of the reader per answer over ``questions`` validation questions."""
    import torch
    from django.conf import settings

    from encoders import get_encoder
    from encoders.model_files import DEFAULT_MODEL, resolve_model_path
    from experts.generation.extractive import reader_dir
    from experts.ml.reader import SentenceReader

    torch.set_num_threads(max(1, settings.TORCH_THREADS))
    read = SentenceReader.load(reader_dir(), resolve_model_path(DEFAULT_MODEL)).score  # served or not: its cost
    data = Dataset.read(dataset)
    rows = [q for q in data.questions("val") if q.get("answer")][:questions]
    items = gold_candidates(data, rows, get_encoder(settings.EMBEDDING_MODEL, max(1, settings.TORCH_THREADS)).encode, say)
    items = [c for c in items if len(c.sentences) > 1]
    for c in items[:WARMUP]:
        read(c.question, c.sentences[:READER_SHORTLIST])
    ms = []
    for c in items:
        started = time.perf_counter()
        read(c.question, c.sentences[:READER_SHORTLIST])
        ms.append((time.perf_counter() - started) * 1000)
    report = {"questions": len(ms), "shortlist": READER_SHORTLIST, "threads": max(1, settings.TORCH_THREADS),
              "added_ms": {"p50": round(float(np.percentile(ms, 50)), 1), "p90": round(float(np.percentile(ms, 90)), 1),
                           "mean": round(float(np.mean(ms)), 1)}}
    say(f"  the reader adds {report['added_ms']['p50']} ms p50, {report['added_ms']['p90']} ms p90 per answer ({len(ms)} questions)")
    return report
