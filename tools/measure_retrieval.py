"""Choose the section chunker's and the sentence re-scoring's settings on doc2dial's validation split, and report test.

What it runs is the product's own code: ``knowledge.ml.chunking.chunk_text`` (by paragraphs, the old
default, or by sections), ``knowledge.services.embedding_text`` / ``sparse_text`` with the chunk's
title, one ``EmbeddedQdrantStore`` collection per domain searched with
``knowledge.services.search_collections`` (hybrid), the re-scoring of ``knowledge.ml.rescoring``
over each chunk's index-time sentence vectors, and the extractive answer
(``experts.ml.extractive.extractive_answer``, the default generator) on the top
``RETRIEVAL_TOP_K`` passages with the product's ``EXTRACTIVE_MIN_SCORE``.

Figures, per split (every user turn with a gold document; the question alone, as serving searches):

* ``doc_recall@5`` / ``doc_ndcg@5``: the gold document among the top 5 after deduplicating chunks by
  document (as ``manage.py evaluate retrieval`` counts);
* ``answer_recall@k``: a top-k chunk of the gold document holds at least 80% of the gold answer's
  words (passage-level recall that does not depend on how the text was cut: doc2dial's
  ``qrels_passages`` name the dataset's own paragraph chunks, which these chunkings do not have);
* ``answer_f1``: the token F1 (SQuAD normalisation) of the extractive answer against doc2dial's gold
  ``answer`` span, citation markers removed; "not found" counts as an empty answer.

Modes: ``oracle`` searches the gold domain's collection only (a perfect router), ``flat`` every
domain's as one. Choices are made on ``val`` (oracle mode) and then reported on ``test``: the chunking
by ``answer_f1`` to two decimals (finer differences are noise at ~400 questions), then doc nDCG@5
(answer recall is not used here: it grows with the chunks' length); the re-scoring by ``answer_f1`` to
two decimals, then ``answer_recall@5`` (the same chunks, so recall is fair). Re-scoring is worth
turning on when, on val, it does not lower ``answer_f1`` and raises ``answer_recall@5`` with a 95%
interval above zero. Differences come with 95% intervals from a paired bootstrap over dialogues
(a dialogue's turns share a document, so they are resampled together). Embeddings are cached text by text under the evaluation cache, so a rerun or a
new setting encodes only new texts. Run from the repository root (takes minutes on a CPU):

    PYTHONPATH=platform:. DJANGO_SETTINGS_MODULE=switchboard.settings python tools/measure_retrieval.py [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

K = 5
POOL = 20  # chunks fetched per search (re-scoring picks from these)
CONTAINS = 0.8  # share of the answer's words a chunk must hold to count as holding the answer
CHUNK_SIZE, CHUNK_OVERLAP = 1000, 150  # the Expert defaults


# --- metrics ----------------------------------------------------------------------------------

def normalise(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return text.split()


def token_f1(prediction: str, gold: str) -> float:
    p, g = normalise(prediction), normalise(gold)
    if not p or not g:
        return float(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def holds_answer(chunk: str, answer: str) -> bool:
    words = set(normalise(answer))
    return bool(words) and len(words & set(normalise(chunk))) / len(words) >= CONTAINS


def ndcg(ranked: list[str], gold: str, k: int = K) -> float:
    return next((1.0 / np.log2(i + 2) for i, unit in enumerate(ranked[:k]) if unit == gold), 0.0)


# --- the text-by-text embedding cache --------------------------------------------------------

class TextVectors:
    """Vectors of texts by their hash, kept in one .npz per model; ``ensure`` encodes only what is missing."""

    def __init__(self, path: Path, model: str, say: Callable[[str], None]):
        self.path, self.model, self.say = path, model, say
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            data = np.load(path, allow_pickle=False)
            self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def add(self, texts: list[str], vectors: np.ndarray) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self.vectors[self.key(text)] = np.asarray(vector, dtype=np.float32)

    def save(self) -> None:
        if not self.vectors:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        tmp = self.path.with_name(self.path.stem + ".partial.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)

    def ensure(self, texts: list[str], what: str) -> None:
        from sbcommon.encoders import get_encoder

        missing = sorted({t for t in texts if self.key(t) not in self.vectors}, key=len)
        if not missing:
            return
        self.say(f"  encoding {len(missing):,} new {what} (of {len(set(texts)):,})")
        encoder = get_encoder(self.model, threads=2)
        t0, step = time.perf_counter(), 256
        for i in range(0, len(missing), step):
            batch = missing[i : i + step]
            self.add(batch, encoder.encode(batch, batch_size=64))
            if (i // step) % 8 == 7:
                self.save()
                self.say(f"    {i + len(batch):,}/{len(missing):,} in {time.perf_counter() - t0:.0f} s")
        self.save()

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[self.key(t)] for t in texts])


# --- one chunking, indexed -------------------------------------------------------------------

def chunk_corpus(docs: list[dict], sections: bool, min_section: int, titled: bool) -> list[dict[str, Any]]:
    """Every document's chunks: the unit, the chunk text and the title its embedding and citation use."""
    from knowledge.ml.chunking import chunk_text, section_title

    out = []
    for i, doc in enumerate(docs):
        for chunk in chunk_text(doc["text"], size=CHUNK_SIZE, overlap=CHUNK_OVERLAP, sections=sections, min_section=min_section):
            title = section_title(doc["title"], chunk.path) if titled else doc["title"]
            out.append({"doc": i, "unit": doc["doc_id"], "domain": doc["domain"], "text": chunk.text, "title": title})
    return out


def build_store(chunks: list[dict[str, Any]], vectors: TextVectors, root: str) -> Any:
    from knowledge.ml.sparse import bm25_vector
    from knowledge.services import embedding_text, sparse_text
    from knowledge.stores.base import PointRecord
    from knowledge.stores.qdrant import EmbeddedQdrantStore

    store = EmbeddedQdrantStore(root)
    by_domain: dict[str, list[PointRecord]] = collections.defaultdict(list)
    for row, chunk in enumerate(chunks):
        indices, values = bm25_vector(sparse_text(chunk["title"], chunk["text"]))
        dense = vectors([embedding_text(chunk["title"], chunk["text"])])[0]
        by_domain[chunk["domain"]].append(PointRecord(id=hashlib.md5(f"{row}".encode()).hexdigest(), dense=dense.tolist(),
                                                      sparse_indices=indices, sparse_values=values, payload={"row": row}))
    for domain, points in by_domain.items():
        store.rebuild(f"m_{domain}", len(points[0].dense), points)
    return store


# --- measuring ---------------------------------------------------------------------------------

def measure(chunks: list[dict[str, Any]], store: Any, queries: list[dict], qvec: np.ndarray, domains: list[str], vectors: TextVectors,
            rescorings: list[tuple[float, int]], min_score: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """``{mode: {variant: figures}}`` over ``queries`` (variant "retrieval" or "rescore w=<weight> pool=<n>"), and the per-question rows."""
    from experts.ml.extractive import Passage, extractive_answer, split_sentences
    from knowledge.ml.rescoring import rerank
    from knowledge.ml.sparse import bm25_vector
    from knowledge.services import search_collections

    sentence_cache: dict[int, np.ndarray | None] = {}

    def sentences_of(row: int) -> np.ndarray | None:
        if row not in sentence_cache:
            found = split_sentences(chunks[row]["text"])
            sentence_cache[row] = vectors(found) if found else None
        return sentence_cache[row]

    question_vectors = {q["text"]: qvec[i] for i, q in enumerate(queries)}

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([question_vectors[t] if t in question_vectors else vectors([t])[0] for t in texts])

    rows: dict[str, dict[str, list[tuple[float, ...]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    names = [f"m_{d}" for d in domains]
    for qi, query in enumerate(queries):
        indices, values = bm25_vector(query["text"], query=True)
        plans = {"oracle": {f"m_{query['domain']}": 1.0}, "flat": dict.fromkeys(names, 1.0)}
        for mode, plan in plans.items():
            hits = search_collections(store, plan, qvec[qi].tolist(), indices, values, limit=POOL, method="hybrid")
            orders = {"retrieval": list(range(len(hits)))}
            for weight, pool in rescorings:
                top = hits[:pool]
                order = rerank(qvec[qi], [h.score for h in top], [sentences_of(h.payload["row"]) for h in top], weight,
                               fallback=[h.dense_score for h in top])
                orders[f"rescore w={weight} pool={pool}"] = order + list(range(len(top), len(hits)))
            for variant, order in orders.items():
                ranked = [hits[i] for i in order]
                found = [chunks[h.payload["row"]] for h in ranked]
                units = list(dict.fromkeys(c["unit"] for c in found))
                gold = query["gold"]
                holds = [c["unit"] == gold and holds_answer(c["text"], query["answer"]) for c in found]
                passages = [Passage(text=c["text"], title=c["title"], score=h.dense_score, chunk_id=str(h.payload["row"]),
                                    sentence_vectors=(lambda row=h.payload["row"]: sentences_of(row)))
                            for c, h in zip(found[:K], ranked[:K], strict=True)]
                answer = extractive_answer(query["text"], passages, embed, min_score=min_score)
                text = re.sub(r"\s*\[\d+\]", "", answer.text) if answer.grounded else ""
                rows[mode][variant].append((
                    float(gold in units[:K]), ndcg(units, gold), float(any(holds[:1])), float(any(holds[:3])), float(any(holds[:K])),
                    token_f1(text, query["answer"]),
                ))
    figures = {mode: {variant: {n: round(float(np.mean([r[j] for r in values])), 4) for j, n in enumerate(FIGURES)} | {"n": len(values)}
                      for variant, values in variants.items()} for mode, variants in rows.items()}
    return figures, rows


def paired_interval(before: list[float], after: list[float], clusters: list[str], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``after - before`` and its 95% interval, resampling whole clusters (dialogues) with replacement."""
    diff = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    names = sorted(set(clusters))
    index = {name: i for i, name in enumerate(names)}
    members = np.asarray([index[c] for c in clusters])
    sums = np.bincount(members, weights=diff, minlength=len(names))
    counts = np.bincount(members, minlength=len(names)).astype(np.float64)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), size=(draws, len(names)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(float(diff.mean()), 4), round(float(low), 4), round(float(high), 4)


FIGURES = ("doc_recall@5", "doc_ndcg@5", "answer_recall@1", "answer_recall@3", "answer_recall@5", "answer_f1")


def compare(before: dict[str, list[tuple[float, ...]]], after: dict[str, list[tuple[float, ...]]], clusters: list[str]) -> dict[str, Any]:
    """``after - before`` per figure with its interval (``before``/``after``: per-question rows of one mode and variant)."""
    return {name: paired_interval([r[j] for r in before], [r[j] for r in after], clusters) for j, name in enumerate(FIGURES)
            if name in ("doc_ndcg@5", "answer_recall@5", "answer_f1")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared" / "datasets" / "doc2dial"))
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--min-sections", default="0,200,400", help="section chunker settings to try on val")
    parser.add_argument("--weights", default="0.25,0.5,0.75,1.0", help="re-scoring weights to try on val")
    parser.add_argument("--pools", default="10,20", help="re-scoring candidate pools to try on val")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings

    from evaluation.datasets import cached_embeddings, dataset_embeddings, embedding_cache_dir, embedding_cache_path, read_jsonl
    from experts.ml.extractive import split_sentences
    from knowledge.services import embedding_text

    say = print
    dataset = Path(args.dataset)
    model = settings.EMBEDDING_MODEL
    docs = read_jsonl(dataset / "docs.jsonl")
    gold = {row["query_id"]: row["doc_id"] for row in read_jsonl(dataset / "qrels.jsonl")}
    records, qx = dataset_embeddings(dataset, model, say)
    domains = sorted({d["domain"] for d in docs})
    splits = {}
    for split in ("val", "test"):
        keep = [i for i, r in enumerate(records) if r.get("split") == split and r["query_id"] in gold and r.get("answer")]
        splits[split] = ([{**records[i], "gold": gold[records[i]["query_id"]]} for i in keep], qx[keep])
    say(f"doc2dial: {len(docs)} documents; val {len(splits['val'][0])} and test {len(splits['test'][0])} questions with a gold answer")

    vectors = TextVectors(embedding_cache_dir() / f"measure-retrieval-{model.replace('/', '_')}.npz", model, say)
    seed = [embedding_text(c["title"], c["text"]) for c in chunk_corpus(docs, False, 0, False)]
    if embedding_cache_path(f"{dataset.name}-chunks-{CHUNK_SIZE}-{CHUNK_OVERLAP}", seed, model).exists():  # ``evaluate retrieval``'s
        vectors.add(seed, cached_embeddings(f"{dataset.name}-chunks-{CHUNK_SIZE}-{CHUNK_OVERLAP}", seed, model, say))
    configs: dict[str, tuple[bool, int, bool]] = {"paragraphs (before)": (False, 0, False)}
    for value in [int(v) for v in args.min_sections.split(",") if v.strip()]:
        configs[f"sections min_section={value}"] = (True, value, True)
    rescorings = [(float(w), int(p)) for w in args.weights.split(",") for p in args.pools.split(",")]
    min_score = float(settings.EXTRACTIVE_MIN_SCORE)
    report: dict[str, Any] = {"dataset": dataset.name, "chunk_size": CHUNK_SIZE, "chunk_overlap": CHUNK_OVERLAP, "embedding_model": model,
                              "k": K, "pool": POOL, "extractive_min_score": min_score, "configs": {}}

    def run(name: str, split: str, rescore: list[tuple[float, int]]) -> tuple[dict[str, Any], dict[str, Any]]:
        sections, min_section, titled = configs[name]
        chunks = chunk_corpus(docs, sections, min_section, titled)
        vectors.ensure([embedding_text(c["title"], c["text"]) for c in chunks], f"chunks ({name})")
        vectors.ensure([s for c in chunks for s in split_sentences(c["text"])], f"sentences ({name})")
        root = tempfile.mkdtemp(prefix="measure-retrieval-")
        try:
            store = build_store(chunks, vectors, root)
            queries, qvec = splits[split]
            t0 = time.perf_counter()
            figures, rows = measure(chunks, store, queries, qvec, domains, vectors, rescore, min_score)
            store.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        say(f"  {name} on {split} ({len(chunks)} chunks, {time.perf_counter() - t0:.0f} s):")
        for mode, variants in figures.items():
            for variant, row in variants.items():
                say(f"    {mode:6s} {variant:26s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items() if k != "n"))
        return {"chunks": len(chunks), "figures": figures}, rows

    clusters = {split: [q["dial_id"] for q in queries] for split, (queries, _) in splits.items()}
    before = "paragraphs (before)"

    def versus(split: str, old: dict[str, Any], new: dict[str, Any], old_variant: str = "retrieval", new_variant: str = "retrieval") -> dict[str, Any]:
        return {mode: compare(old[mode][old_variant], new[mode][new_variant], clusters[split]) for mode in ("oracle", "flat")}

    # 1. The chunker on val, without re-scoring.
    say("1. chunking, validation split")
    val, val_rows = {}, {}
    for name in configs:
        val[name], val_rows[name] = run(name, "val", [])

    def chunking_key(name: str) -> tuple[float, float]:
        row = val[name]["figures"]["oracle"]["retrieval"]
        return (round(row["answer_f1"], 2), row["doc_ndcg@5"])

    best = max((n for n in configs if configs[n][0]), key=chunking_key)
    say(f"  chosen on val: {best}; against {before} (mean, 95% interval): {versus('val', val_rows[before], val_rows[best])}")
    # 2. Re-scoring on val over the chosen chunking.
    say("2. re-scoring, validation split")
    val_rescore, rescore_rows = run(best, "val", rescorings)
    oracle = val_rescore["figures"]["oracle"]
    best_rescore = max((v for v in oracle if v != "retrieval"), key=lambda v: (round(oracle[v]["answer_f1"], 2), oracle[v]["answer_recall@5"]))
    gain = versus("val", rescore_rows, rescore_rows, new_variant=best_rescore)
    helps = gain["oracle"]["answer_f1"][0] >= 0 and gain["oracle"]["answer_recall@5"][1] > 0
    say(f"  best re-scoring on val: {best_rescore}: {'helps' if helps else 'does not help'} ({gain})")
    # 3. Test: before, the chosen chunking, each with and without the chosen re-scoring.
    say("3. test split")
    chosen = [(float(best_rescore.split("w=")[1].split()[0]), int(best_rescore.split("pool=")[1]))]
    test, test_rows = {}, {}
    for name in (before, best):
        test[name], test_rows[name] = run(name, "test", chosen)
    comparisons = {
        "val": {"sections vs paragraphs": versus("val", val_rows[before], val_rows[best]), "rescoring on sections": gain},
        "test": {
            "sections vs paragraphs": versus("test", test_rows[before], test_rows[best]),
            "rescoring on sections": versus("test", test_rows[best], test_rows[best], new_variant=best_rescore),
            "sections and rescoring vs paragraphs": versus("test", test_rows[before], test_rows[best], new_variant=best_rescore),
        },
    }
    say("differences (mean, 95% interval), oracle and flat:")
    for split, rows in comparisons.items():
        for what, modes in rows.items():
            say(f"  {split:4s} {what}: {modes}")
    report["configs"] = {name: dict(zip(("sections", "min_section", "section_titles"), value, strict=True)) for name, value in configs.items()}
    report["val"] = {"chunking": val, "rescoring": val_rescore}
    report["chosen"] = {"chunking": best, "rescoring": best_rescore, "rescoring_helps_on_val": helps}
    report["test"] = test
    report["differences"] = comparisons
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2))
        say(f"wrote {args.json_path}")


if __name__ == "__main__":
    main()
