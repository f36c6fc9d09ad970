"""Reading labelled queries in the shared format, sampling them by label, and the evaluations' embedding cache."""

import json
from collections import Counter

import numpy as np

import encoders
from evaluation.datasets import (
    cached_embeddings,
    dataset_embeddings,
    labelled,
    read_queries,
    split_names,
    stratified_sample,
    texts_fingerprint,
)


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


class CountingEncoder:
    """One fixed vector per text's length; counts the texts it is asked to encode."""

    def __init__(self):
        self.texts = 0

    def encode(self, texts, batch_size=64):
        self.texts += len(texts)
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)


def test_embeddings_are_cached_by_name_model_and_texts(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDDING_DISK_CACHE", str(tmp_path / "cache"))
    encoder = CountingEncoder()
    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: encoder)
    first = cached_embeddings("set", ["a", "bb"], "some/model", say=lambda _: None)
    again = cached_embeddings("set", ["a", "bb"], "some/model", say=lambda _: None)
    assert encoder.texts == 2  # the second call read the cache
    assert again.tolist() == first.tolist() == [[1.0, 1.0], [2.0, 1.0]]
    cached_embeddings("set", ["a", "bb"], "other-model", say=lambda _: None)
    cached_embeddings("set", ["bb", "a"], "some/model", say=lambda _: None)
    assert encoder.texts == 6  # another model or other texts: a miss that recomputes
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert names == sorted(f"set-{model}-{texts_fingerprint(texts)}.npy" for model, texts in (
        ("some_model", ["a", "bb"]), ("other-model", ["a", "bb"]), ("some_model", ["bb", "a"])))


def test_a_dataset_folder_gives_its_records_their_embeddings_and_splits(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDDING_DISK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: CountingEncoder())
    (tmp_path / "tiny").mkdir()
    folder = write(tmp_path / "tiny", [
        {"text": "pay my bill", "split": "train"}, {"text": "hi", "split": "test"}, {"text": "joke"},
    ])
    records, x = dataset_embeddings(folder, "m", say=lambda _: None)
    assert [r["text"] for r in records] == ["pay my bill", "hi", "joke"]
    assert x[:, 0].tolist() == [11.0, 2.0, 4.0]
    assert split_names(records).tolist() == ["train", "test", ""]
    assert (tmp_path / "cache" / f"tiny-m-{texts_fingerprint(['pay my bill', 'hi', 'joke'])}.npy").exists()
