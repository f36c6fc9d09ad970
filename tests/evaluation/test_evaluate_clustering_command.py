"""``manage.py evaluate clustering`` end to end on a small dataset in the shared format (real encoder)."""

import json

import pytest
from django.core.management import call_command

DOMAINS = {
    "cooking": ["how do I bake {} bread", "recipe for {} soup", "how long to roast {} chicken", "best way to cook {} rice"],
    "banking": ["transfer {} dollars to my savings account", "what is my checking balance {}", "pay my credit card bill {}", "freeze my debit card {}"],
    "weather": ["will it rain {} tomorrow", "what is the temperature {} today", "is there a storm warning {}", "forecast for {} this weekend"],
}
FILLERS = ["please", "now", "quickly", "in london", "for me", "again", "today", "here", "right away", "this time"]
METHODS = ("ours", "ours_topics", "hdbscan", "kmeans")
SCORES = ("n_clusters", "noise_fraction", "ari", "nmi", "v_measure", "purity", "wall_s", "peak_mb")


@pytest.fixture
def dataset(tmp_path, monkeypatch):
    """120 queries in three clearly different domains, plus one out-of-scope row without a domain."""
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_CACHE", str(tmp_path / "cache"))
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


def test_it_scores_our_pipeline_against_hdbscan_and_kmeans(dataset, tmp_path, encoder):
    out = tmp_path / "report.json"
    call_command("evaluate", "clustering", "--dataset", str(dataset), "--json", str(out))
    report = json.loads(out.read_text())
    assert (report["n"], report["n_labels"], report["k"], report["label"]) == (120, 3, 3, "domain")
    for method in METHODS:
        assert set(SCORES) <= set(report[method]), method
        assert 0.0 <= report[method]["noise_fraction"] <= 1.0
        assert 0.0 <= report[method]["purity"] <= 1.0
        assert report[method]["wall_s"] >= 0.0
    assert report["ours"]["n_clusters"] == 3
    assert report["ours"]["noise_fraction"] == 0.0  # noise joins its nearest proposal
    assert report["ours"]["ari"] > 0.9
    assert report["ours"]["purity"] > 0.95
    assert report["kmeans"]["n_clusters"] == 3
    assert report["ours_topics"]["n_clusters"] >= 3
    assert set(report["checks"]) == {"ours_ari_above_hdbscan_and_kmeans", "ours_purity_above_hdbscan_and_kmeans", "ours_topics_nmi_above_hdbscan"}


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
def test_on_the_shared_datasets_our_domain_proposals_beat_hdbscan_and_kmeans(name):
    """The issue's targets (minutes: HDBSCAN with default settings is slow at 384 dimensions)."""
    from evaluation.clustering import default_datasets_dir, evaluate_clustering

    folder = default_datasets_dir() / name
    if not (folder / "queries.jsonl").exists():
        pytest.skip(f"{folder} is not here")
    report = evaluate_clustering(folder, label="domain", say=lambda _: None)
    assert report["checks"]["ours_ari_above_hdbscan_and_kmeans"]
    assert report["checks"]["ours_purity_above_hdbscan_and_kmeans"]
