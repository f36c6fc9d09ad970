"""Reading labelled queries in the shared format and sampling them by label."""

import json
from collections import Counter

import numpy as np

from labeling.ml.datasets import labelled, read_queries, stratified_sample, texts_fingerprint


def write(tmp_path, rows):
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_rows_without_the_label_are_left_out(tmp_path):
    folder = write(tmp_path, [
        {"text": "pay my bill", "domain": "banking", "intent": "pay_bill"},
        {"text": "tell me a joke", "domain": None, "intent": "oos"},
        {"text": "rain tomorrow?", "domain": "weather", "intent": None},
    ])
    records = read_queries(folder)
    by_domain = labelled(records, "domain")
    assert by_domain.texts == ["pay my bill", "rain tomorrow?"]
    assert by_domain.labels == ["banking", "weather"]
    assert by_domain.rows.tolist() == [0, 2]
    by_intent = labelled(records, "intent")
    assert by_intent.labels == ["pay_bill", "oos"]


def test_a_stratified_sample_keeps_every_labels_share():
    labels = ["a"] * 600 + ["b"] * 300 + ["c"] * 100
    picked = stratified_sample(labels, 100, seed=1)
    counts = Counter(labels[i] for i in picked)
    assert picked.size == 100
    assert counts == {"a": 60, "b": 30, "c": 10}
    assert (np.diff(picked) > 0).all()


def test_a_sample_larger_than_the_data_is_all_of_it():
    assert stratified_sample(["a", "b"], 10).tolist() == [0, 1]


def test_small_labels_keep_at_least_one_row():
    labels = ["a"] * 98 + ["b", "c"]
    counts = Counter(labels[i] for i in stratified_sample(labels, 10))
    assert counts["b"] == 1
    assert counts["c"] == 1


def test_the_fingerprint_changes_with_the_texts_and_their_order():
    assert texts_fingerprint(["a", "b"]) == texts_fingerprint(["a", "b"])
    assert texts_fingerprint(["a", "b"]) != texts_fingerprint(["b", "a"])
    assert texts_fingerprint(["ab"]) != texts_fingerprint(["a", "b"])
