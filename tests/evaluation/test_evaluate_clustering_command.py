"""``manage.py evaluate clustering`` end to end on a small dataset in the shared format (real encoder)."""

import json

import pytest
from django.core.management import call_command

from labeling.ml import discovery

DOMAINS = {
    "cooking": ["how do I bake {} bread", "recipe for {} soup", "how long to roast {} chicken", "best way to cook {} rice"],
    "banking": ["transfer {} dollars to my savings account", "what is my checking balance {}", "pay my credit card bill {}", "freeze my debit card {}"],
    "weather": ["will it rain {} tomorrow", "what is the temperature {} today", "is there a storm warning {}", "forecast for {} this weekend"],
}
FILLERS = ["please", "now", "quickly", "in london", "for me", "again", "today", "here", "right away", "this time"]
METHODS = ("ours", "ours_topics", "hdbscan", "kmeans", "ours_product", "kmeans_same_k", "hdbscan_grouped", "hdbscan_grouped_same_k")
SCORES = ("n_clusters", "noise_fraction", "ari", "nmi", "v_measure", "purity", "wall_s", "peak_mb")


@pytest.fixture
def dataset(tmp_path, monkeypatch):
    """120 queries in three clearly different domains, plus one out-of-scope row without a domain."""
    monkeypatch.setenv("EMBEDDING_DISK_CACHE", str(tmp_path / "cache"))
    rows = [
        {"text": template.format(filler), "domain": domain, "intent": f"{domain}_{t}", "split": "train"}
        for domain, templates in DOMAINS.items()
        for t, template in enumerate(templates)
        for filler in FILLERS
    ]
    rows.append({"text": "tell me a joke", "domain": None, "intent": "oos", "split": "oos"})
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_it_scores_the_product_path_and_ours_against_hdbscan_and_kmeans_at_full_strength(dataset, tmp_path, encoder):
    out = tmp_path / "report.json"
    call_command("evaluate", "clustering", "--dataset", str(dataset), "--json", str(out))
    report = json.loads(out.read_text())
    assert (report["n"], report["n_labels"], report["k"], report["label"]) == (120, 3, 3, "domain")
    assert report["rows"] == "all rows (the dataset's labelled rows are all in its train split)"
    for method in METHODS:
        assert set(SCORES) <= set(report[method]), method
        assert 0.0 <= report[method]["noise_fraction"] <= 1.0
        assert 0.0 <= report[method]["purity"] <= 1.0
        assert report[method]["wall_s"] >= 0.0
    assert report["ours"]["n_clusters"] == 3
    assert report["ours"]["noise_fraction"] == 0.0  # noise joins its nearest proposal
    product = report["ours_product"]
    assert product["k_suggested"] is True
    assert product["k"] == report["k_suggested"]  # K from the data, not the labels
    assert (product["grouping"], product["noise"]) == (discovery.DEFAULT_GROUPING, discovery.DEFAULT_NOISE)
    assert product["noise_fraction"] == 0.0
    assert report["kmeans"]["n_init"] == report["kmeans_same_k"]["n_init"] == 10
    assert report["kmeans_same_k"]["k"] == report["hdbscan_grouped_same_k"]["k"] == product["k"]
    assert report["hdbscan_grouped"]["k_suggested"] is True
    assert report["ours"]["ari"] > 0.9
    assert report["ours"]["purity"] > 0.95
    assert report["kmeans"]["n_clusters"] == 3
    assert report["ours_topics"]["n_clusters"] >= 3
    assert set(report["checks"]) == {
        "ours_ari_above_hdbscan_and_kmeans", "ours_purity_above_hdbscan_and_kmeans", "ours_topics_nmi_above_hdbscan",
        "ours_product_ari_ge_kmeans_same_k", "ours_product_ari_ge_hdbscan_grouped", "ours_product_ari_ge_hdbscan_grouped_same_k",
    }


def test_by_default_it_clusters_the_rows_outside_train_and_variants_cover_every_grouping(dataset, tmp_path, encoder):
    rows = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["split"] = "test" if i % 2 else "train"
    (dataset / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "report.json"
    call_command("evaluate", "clustering", "--dataset", str(dataset), "--variants", "--json", str(out))
    report = json.loads(out.read_text())
    assert (report["split"], report["rows"], report["n"]) == ("heldout", "every row outside the train split", 60)
    assert len(report["variants"]) == 2 * len(discovery.GROUPINGS) * len(discovery.NOISE_MODES)
    assert {"ari", "purity", "noise_fraction", "k"} <= set(report["variants"]["true_k:topics:leave"])
    call_command("evaluate", "clustering", "--dataset", str(dataset), "--split", "train", "--json", str(out))
    assert json.loads(out.read_text())["n"] == 60


def test_it_evaluates_at_intent_level_with_a_given_number_of_experts(dataset, tmp_path, encoder):
    out = tmp_path / "report.json"
    call_command("evaluate", "clustering", "--dataset", str(dataset), "--label", "intent", "--experts", "5", "--limit", "60", "--json", str(out))
    report = json.loads(out.read_text())
    assert (report["n"], report["k"], report["limit"]) == (60, 5, 60)
    assert report["n_labels"] >= 12  # a stratified sample: every intent keeps its share
    assert report["ours"]["n_clusters"] == 5


def test_bench_reports_ours_and_sklearn_on_both_variants(dataset, tmp_path, encoder):
    out = tmp_path / "bench.json"
    call_command("bench", "clustering", "--n", "1500", "--datasets", str(dataset.parent), "--json", str(out))
    report = json.loads(out.read_text())
    assert report["n"] == 1500
    for variant in ("synthetic", "real"):
        assert set(report[variant]) >= {"ours", "sklearn_dbscan"}
        for side in ("ours", "sklearn_dbscan"):
            assert set(report[variant][side]) >= {"wall_s", "peak_mb", "ari"}
        assert report[variant]["ours"]["ari_vs_sklearn"] == pytest.approx(1.0)
    assert report["ours"] == report["real"]["ours"]
    assert report["sklearn_dbscan"] == report["real"]["sklearn_dbscan"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["clinc150", "hwu64"])
def test_on_the_shared_datasets_the_product_path_is_at_least_as_good_as_kmeans_and_hdbscan_at_the_same_k(name):
    """The issue's targets, on the held-out rows (the defaults were chosen on train). Minutes: HDBSCAN at 384 dimensions is slow."""
    from evaluation.clustering import default_datasets_dir, evaluate_clustering

    folder = default_datasets_dir() / name
    if not (folder / "queries.jsonl").exists():
        pytest.skip(f"{folder} is not here")
    report = evaluate_clustering(folder, label="domain", say=lambda _: None)
    figures = {m: report[m]["ari"] for m in ("ours_product", "kmeans_same_k", "hdbscan_grouped", "kmeans")}
    assert report["checks"]["ours_product_ari_ge_kmeans_same_k"], figures
    assert report["checks"]["ours_product_ari_ge_hdbscan_grouped"], figures


@pytest.fixture
def workspace(tmp_path, settings):
    """A fresh embedded store and data folder under tmp_path."""
    from knowledge.stores import get_store

    settings.QDRANT_URL, settings.QDRANT_PATH, settings.VAR_DIR = "", str(tmp_path / "qdrant"), tmp_path
    get_store.cache_clear()
    yield
    get_store().close()
    get_store.cache_clear()


DOCUMENTS = {
    "cooking": "Bake bread at 220 degrees. A soup recipe needs stock. Roast chicken for an hour. Cook rice in twice its water.",
    "banking": "Transfer money between your savings and checking account. Pay your credit card bill online. Freeze a lost debit card.",
    "weather": "The forecast gives rain, temperature and storm warnings for today, tomorrow and the weekend.",
}


@pytest.mark.django_db
def test_replay_runs_discovery_through_the_product_with_and_without_each_departments_documents(dataset, tmp_path, workspace, encoder):
    docs = [{"doc_id": domain, "domain": domain, "title": domain.title(), "text": text} for domain, text in DOCUMENTS.items()]
    (dataset / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    out = tmp_path / "replay.json"

    call_command("evaluate", "clustering", "--dataset", str(dataset), "--replay", "--in-place", "--split", "all", "--json", str(out))

    report = json.loads(out.read_text())
    assert report["pipeline"] == "product"
    assert report["without_documents"]["n"] == report["with_documents"]["n"] == 120
    assert report["with_documents"]["proposals"] == 3
    assert report["with_documents"]["ari"] > 0.9


@pytest.mark.django_db
def test_replay_without_documents_reports_none_for_the_seeded_run(dataset, tmp_path, workspace, encoder):
    out = tmp_path / "replay.json"

    call_command("evaluate", "clustering", "--dataset", str(dataset), "--replay", "--in-place", "--split", "all", "--json", str(out))

    report = json.loads(out.read_text())
    assert report["without_documents"]["proposals"] >= 2
    assert report["with_documents"] is None
