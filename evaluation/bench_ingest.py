"""``manage.py bench ingest``: how fast a team's documents become searchable, through the product's own path.

The documents (doc2dial's ``docs.jsonl`` by default, or every file of a folder) go to one new expert through
``knowledge.ingest.ingest_files``, what an upload job runs: parse, store, chunk, embed, write the collection.
From the shell it runs in a throw-away workspace (``evaluation.workspace.isolated``). The encoder is loaded
before the clock starts. A passage is what a search returns: one chunk of a document. ``cpu_s`` (this
process's CPU time, the encoder's threads included) tells the work apart from a busy machine's waiting.

The job makes every passage searchable first, then adds the passages' sentence vectors to their payloads
(what the extractive answer reads instead of encoding a passage's sentences when it first answers from it).
``passages_per_s`` and ``searchable_s`` time the first part; ``complete_s`` and ``complete_passages_per_s``
the whole job, sentence vectors included; the CPU figures are given for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "doc2dial" / "docs.jsonl"
EXPERT = "bench-ingest"
TARGET_PASSAGES_PER_S = 50  # issue 56: about 1,500 passages in 30 s


def bench_ingest(paths: list[Path] | None = None, say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Ingest ``paths`` (files or folders; default: doc2dial's documents) into a new expert and time it."""
    from django.conf import settings

    from encoders import bulk_threads, get_encoder
    from experts.services import upsert_expert
    from knowledge.ingest import ingest_files, walk_paths

    files = walk_paths(paths or [DEFAULT_SOURCE])
    if not files:
        raise ValueError("no files to ingest")
    expert, created = upsert_expert(EXPERT, "Ingestion benchmark")
    if not created:
        raise ValueError(f"expert {EXPERT!r} already exists: run the benchmark in a fresh workspace")
    if settings.EMBEDDING_DISK_CACHE:
        say(f"warning: EMBEDDING_DISK_CACHE is set ({settings.EMBEDDING_DISK_CACHE}): texts met before are not embedded again")
    get_encoder(threads=bulk_threads()).encode(["warm-up"])  # the encoder indexing uses (knowledge.points)
    say(f"ingesting {len(files)} file(s) into {EXPERT}")
    started, cpu = time.perf_counter(), time.process_time()
    report = ingest_files(expert, [(f.name, f) for f in files])
    complete, cpu = time.perf_counter() - started, time.process_time() - cpu
    documents, chunks = report.created + report.updated, int(report.indexing.get("chunks", 0))
    # The sentence vectors are the job's tail: every passage was searchable when they began.
    searchable = complete - float(report.indexing.get("sentences_s", 0.0))
    searchable_cpu = cpu - float(report.indexing.get("sentences_cpu_s", 0.0))
    result: dict[str, Any] = {
        "files": len(files), "failed_files": len(report.failed), "documents": documents, "chunks": chunks,
        "searchable_s": round(searchable, 2), "documents_per_s": round(documents / searchable, 2), "chunks_per_s": round(chunks / searchable, 2),
        "passages_per_s": round(chunks / searchable, 2), "cpu_ms_per_passage": round(1000 * searchable_cpu / max(1, chunks), 1),
        "complete_s": round(complete, 2), "complete_passages_per_s": round(chunks / complete, 2), "cpu_s": round(cpu, 2),
        "complete_cpu_ms_per_passage": round(1000 * cpu / max(1, chunks), 1),
        "phases_s": {"parse": round(report.parse_s, 2), **report.indexing.get("seconds", {})}, "target_passages_per_s": TARGET_PASSAGES_PER_S,
        "encoder_threads": bulk_threads(), "disk_cache": bool(settings.EMBEDDING_DISK_CACHE),
    }
    result["meets_target"] = result["passages_per_s"] >= TARGET_PASSAGES_PER_S
    say(f"  {documents} documents, {chunks} passages searchable in {result['searchable_s']} s: {result['passages_per_s']} passages/s, "
        f"{result['documents_per_s']} documents/s (target {TARGET_PASSAGES_PER_S} passages/s); with their sentence vectors "
        f"{result['complete_s']} s, {result['complete_passages_per_s']} passages/s; seconds by phase {result['phases_s']}")
    return result
