"""``manage.py bench retrieval``: search latency of one expert collection in the embedded store.

``chunks`` synthetic chunks (random unit vectors, Zipf-distributed words) in a temporary Qdrant Edge
store, searched through the store's public interface by method, against the same hybrid search over
qdrant-client's local mode. No encoder is loaded: query embedding is measured elsewhere.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from knowledge.ml.sparse import bm25_vector
from knowledge.stores.base import PointRecord
from knowledge.stores.edge import EdgeQdrantStore
from knowledge.stores.qdrant_server import ServerQdrantStore

VOCABULARY = 20_000
WORDS_PER_CHUNK = 160


def _words(rng: np.random.Generator, n: int) -> list[str]:
    ranks = np.minimum(rng.zipf(1.3, size=n), VOCABULARY)
    return [f"w{r}" for r in ranks]


def _unit_vectors(rng: np.random.Generator, n: int, dimension: int) -> np.ndarray:
    vectors = rng.normal(size=(n, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _points(n: int, dimension: int, rng: np.random.Generator) -> list[PointRecord]:
    vectors = _unit_vectors(rng, n, dimension)
    points = []
    for i in range(n):
        text = " ".join(_words(rng, WORDS_PER_CHUNK))
        idx, val = bm25_vector(text)
        points.append(PointRecord(id=str(uuid.uuid4()), dense=vectors[i].tolist(), sparse_indices=idx, sparse_values=val,
                                  payload={"document_id": i // 10, "position": i % 10, "title": f"doc {i // 10}", "text": text[:400]}))
    return points


def _timed(fn: Callable[[int], Any], n: int) -> dict[str, float]:
    fn(0)  # warm-up: first load of the snapshot
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 3), "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
            "mean_ms": round(statistics.fmean(times), 3), "queries": n}


def bench_retrieval(chunks: int = 10_000, queries: int = 200, dimension: int = 384, baseline: bool = True, seed: int = 0,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Latency figures for a collection of ``chunks`` chunks: Qdrant Edge by method, and local mode as the baseline."""
    rng = np.random.default_rng(seed)
    say(f"building {chunks:,} synthetic chunks ({dimension} dimensions)")
    points = _points(chunks, dimension, rng)
    qvectors = _unit_vectors(rng, queries, dimension)
    qsparse = [bm25_vector(" ".join(_words(rng, 6)), query=True) for _ in range(queries)]
    report: dict[str, Any] = {"chunks": chunks, "dimension": dimension, "queries": queries, "limit": 5}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as root:
        writer = EdgeQdrantStore(Path(root))
        name = "bench"
        t0 = time.perf_counter()
        writer.rebuild(name, dimension, points)
        report["rebuild_s"] = round(time.perf_counter() - t0, 2)
        say(f"  rebuilt the collection in {report['rebuild_s']} s")
        reader = EdgeQdrantStore(Path(root))  # a fresh process's view: loads the active shard
        t0 = time.perf_counter()
        assert reader.count(name) == chunks
        report["reader_load_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        writer.replace_documents(name, {0: points[:10]})
        report["replace_document_s"] = round(time.perf_counter() - t0, 2)
        report["embedded"] = {}
        for method in ("hybrid", "dense", "sparse"):
            report["embedded"][method] = _timed(lambda i, m=method: reader.search(name, qvectors[i].tolist(), *qsparse[i], limit=5, method=m), queries)
            say(f"  embedded {method:6s} p50 {report['embedded'][method]['p50_ms']:.2f} ms, p99 {report['embedded'][method]['p99_ms']:.2f} ms")
        # Routed top-2: the same collection twice stands in for two experts of this size.
        report["embedded"]["hybrid_two_collections"] = _timed(
            lambda i: reader.search_many([name, name], qvectors[i].tolist(), *qsparse[i], limit=5, weights=[0.7, 0.3]), queries)
        if baseline:
            local = ServerQdrantStore(":memory:")
            local.rebuild(name, dimension, points)
            n = min(queries, 100)
            report["local_mode"] = {"hybrid": _timed(lambda i: local.search(name, qvectors[i].tolist(), *qsparse[i], limit=5), n)}
            say(f"  local mode hybrid p50 {report['local_mode']['hybrid']['p50_ms']:.2f} ms (the baseline)")
        reader.close()
        writer.close()
    report["target_p50_ms"] = 20
    report["meets_target"] = report["embedded"]["hybrid"]["p50_ms"] < 20
    return report
