"""``manage.py evaluate sentences``: which sentence the extractive answer quotes, and the fit behind its weights.

For every question of a dataset with a gold ``answer`` it builds the candidates the product would
score (the ``auto`` mode's top passages with text, their sentences and features by
``extractive.candidate_sentences``) and each sentence's token F1 against the gold answer. It fits
the scorer on a sample of train (linear, ``fit_weights``; and the network, ``fit_mlp``) and reports
on validation and test the F1 of the sentence each scorer ranks first: ``hand_set``,
``linear_default``, ``default`` (the shipped file), ``refit``, ``refit_mlp`` and ``best_possible``;
``shortlist_ceiling`` (the best of the first k), ``held_out_domains``, ``own_domains`` and ``reader``
(``evaluation.reader.reader_figures``). ``save_scorer`` writes ``refit_mlp`` as the shipped file:
``evaluate sentences --dataset doc2dial --save-scorer experts/ml/sentence_scorer.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.reader import Candidates, answered, reader_figures, rounded
from evaluation.workspace import Dataset, ask, load
from experts.ml.answer_metrics import token_f1
from experts.ml.extractive import ChunkSentenceCache, Passage, candidate_sentences, quoted
from experts.ml.sentence_scorer import HAND_SET, best_of_top, fit_mlp, fit_weights, load_scorer, picked_f1

Say = Callable[[str], None]
PULLS = (0.0, 0.01, 0.1)
SHORTLISTS = (1, 2, 3, 5)  # ``shortlist_ceiling``: the shortlist sizes whose best sentence is reported
DEFAULT_TRAIN_LIMIT = 3000
MAX_PASSAGES = 3  # extractive_answer's default: the passages whose sentences compete
SEED = 0
# The linear weights the extractive answer served before the shipped network (``fit_weights`` on doc2dial's train
# split, soft targets and no pull chosen on its validation split): a baseline here, no longer a product option.
LINEAR_DEFAULT = {
    "cosine": 1.82, "overlap": 0.795, "passage_rank": -0.158, "first_in_passage": 0.439, "heading": 0.007,
    "question": -0.501, "log_words": 0.522, "previous_cosine": 1.074, "after_question": 0.166,
}

Group = tuple[np.ndarray, np.ndarray]


def evaluate_sentences(dataset: Path, train_limit: int | None = DEFAULT_TRAIN_LIMIT, say: Say = print, save_scorer: Path | None = None) -> dict[str, Any]:
    """The report (see the module docstring); with ``save_scorer``, the refitted network written there (atomically)."""
    from django.conf import settings

    from encoders import get_encoder

    started = time.perf_counter()
    data = Dataset.read(dataset)
    if not data.documents:
        raise ValueError(f"{dataset} has no docs.jsonl to quote from")
    rows, validation = answered(data, train_limit)
    load(data, say=say)
    encoder = get_encoder(settings.EMBEDDING_MODEL, max(1, settings.TORCH_THREADS))
    cache = ChunkSentenceCache(size=100_000)
    groups: dict[str, list[Group]] = {}
    group_domains: dict[str, list[str]] = {}
    read: dict[str, list[Candidates]] = {}
    shipped = load_scorer(None)
    for split, chosen in rows.items():
        groups[split], group_domains[split], read[split] = [], [], []
        for q in chosen:
            # The passages the chat path retrieved for the question as asked (auto, with its conversation's user turns).
            result = ask(q, "auto")
            top = [Passage(**{k: v for k, v in p.items() if k != "index"}) for p in result.passages if p.get("text", "").strip()][:MAX_PASSAGES]
            found = candidate_sentences(q["text"], top, encoder.encode, cache) if top else None
            if found is None:
                continue
            candidates, features = found
            f1 = np.array([token_f1(quoted(sentence), q["answer"]) for _, _, sentence in candidates])  # as the answer quotes it
            groups[split].append((features, f1))
            order = np.argsort(-shipped.score(features), kind="stable")
            read[split].append(Candidates(q["text"], [candidates[i][2] for i in order], f1[order]))
            group_domains[split].append(q["domain"])
        say(f"  {split}: {len(groups[split])} questions with candidate sentences (of {len(chosen)})")

    fits = {pull: fit_weights(groups["train"], pull=pull) for pull in PULLS}
    val_f1 = {pull: picked_f1(groups["val"], w) or 0.0 for pull, w in fits.items()}
    pull = max(PULLS, key=lambda p: (val_f1[p], p))  # ties: the stronger pull
    refit = fits[pull]
    network = fit_mlp(groups["train"], seed=SEED)
    report_held_out, report_own = held_out_domains(groups, group_domains, say), own_domains(groups, group_domains, network, say)
    scorers = {"hand_set": HAND_SET, "linear_default": LINEAR_DEFAULT, "default": load_scorer(None), "refit": refit, "refit_mlp": network}
    picked = {split: {name: rounded(picked_f1(groups[split], w)) for name, w in scorers.items()} for split in ("val", "test")}
    for split in picked:
        picked[split]["best_possible"] = rounded(float(np.mean([g[1].max() for g in groups[split]]))) if groups[split] else None
    # What a judge of the shipped scorer's first k choices could reach at most (the language model's
    # ``select`` decoding judges selection.SHORTLIST of them): the best of the k, by split.
    ceiling = {split: {str(k): rounded(best_of_top(groups[split], scorers["default"], k)) for k in SHORTLISTS} for split in ("val", "test")}
    report = {
        "pipeline": "product",
        "dataset": dataset.name,
        "n_questions": {split: len(g) for split, g in groups.items()},
        "validation": validation,
        "picked_f1": picked,
        "shortlist_ceiling": ceiling,
        "candidates_per_question": {split: rounded(float(np.mean([len(f) for _, f in groups[split]]))) if groups[split] else None for split in ("val", "test")},
        "pull_chosen_on_val": pull,
        "val_f1_by_pull": {str(p): rounded(v) for p, v in val_f1.items()},
        "weights": {"linear_default": LINEAR_DEFAULT, "refit": refit, "hand_set": HAND_SET},
        "network": network.report,
        "paired_val": {name: _paired(groups["val"], scorers[name], scorers["linear_default"]) for name in ("default", "refit_mlp")},
        "held_out_domains": report_held_out,
        "reader": _reader_report(read),
        "own_domains": report_own,
        "targets": {
            "default_beats_hand_set_on_test": _gt(picked["test"]["default"], picked["test"]["hand_set"]),
            # the shipped scorer against the better of the two refitted here: is it still as good as a fresh fit?
            "default_within_0.01_of_refit_on_test": None if picked["test"]["refit"] is None or picked["test"]["default"] is None
            else picked["test"]["default"] >= max(picked["test"]["refit"], picked["test"]["refit_mlp"] or 0.0) - 0.01,
            "network_beats_linear_on_val": _gt(picked["val"]["refit_mlp"], picked["val"]["refit"]),
            "network_beats_linear_on_held_out_domains": None if report_held_out["paired"] is None else report_held_out["paired"]["mean"] > 0,
        },
        "seconds": round(time.perf_counter() - started, 1),
    }
    for split in ("val", "test"):
        say(f"  {split}: " + ", ".join(f"{name} {value}" for name, value in picked[split].items()))
        say(f"  {split}: the best of the shipped scorer's first k sentences: " + ", ".join(f"k={k} {v}" for k, v in ceiling[split].items()))
    say(f"  refit (pull {pull}, chosen on val): {refit}")
    if save_scorer is not None:
        save_network(network, Path(save_scorer), {"dataset": dataset.name, "fitted_on": f"train split, {len(groups['train'])} questions",
                                                   "picked_f1": {split: {"network": picked[split]["refit_mlp"], "linear": picked[split]["refit"],
                                                                         "best_possible": picked[split]["best_possible"]} for split in picked},
                                                   "command": f"manage.py evaluate sentences --dataset {dataset} --save-scorer {save_scorer}"})
        say(f"  the refitted network written to {save_scorer}")
    return report


def _reader_report(items: dict[str, list[Candidates]]) -> dict[str, Any] | None:
    """``reader_figures`` of the trained reader (served or not) on validation and test; None while there is none."""
    from encoders.model_files import DEFAULT_MODEL, resolve_model_path
    from experts.generation.extractive import reader_dir
    from experts.ml.reader import SentenceReader

    try:
        read = SentenceReader.load(reader_dir(), resolve_model_path(DEFAULT_MODEL)).score
    except FileNotFoundError:
        return None
    return {split: reader_figures(items[split], read) for split in ("val", "test")}


def held_out_domains(groups: dict[str, list[Group]], domains: dict[str, list[str]], say: Say) -> dict[str, Any]:
    """Does the network carry over to a domain it never saw? For each domain, the linear weights and the network
    fitted (with the shipped settings) on the other domains' train questions, scored on that domain's test
    questions; paired per question over all of them."""
    per_domain: dict[str, Any] = {}
    diffs = []
    for domain in sorted(set(domains["train"])):
        train = [g for g, d in zip(groups["train"], domains["train"], strict=True) if d != domain]
        test = [g for g, d in zip(groups["test"], domains["test"], strict=True) if d == domain and len(g[1])]
        if not test or not train:
            continue
        linear, network = load_scorer(fit_weights(train)), fit_mlp(train, seed=SEED)
        diffs.append(_differences(test, network, linear))
        per_domain[domain] = {"n": len(test), "network": rounded(picked_f1(test, network)), "linear": rounded(picked_f1(test, linear))}
        say(f"  held out {domain}: network {per_domain[domain]['network']}, linear {per_domain[domain]['linear']} ({len(test)} test questions)")
    if not diffs:
        return {"domains": per_domain, "paired": None}
    return {"domains": per_domain, "paired": _mean_se(np.concatenate(diffs)),
            "how": "each domain's test questions, scored by the linear weights and the network fitted on the other domains' train questions"}


def own_domains(groups: dict[str, list[Group]], domains: dict[str, list[str]], shared: Any, say: Say) -> dict[str, Any]:
    """Would an expert quote better with a scorer of its own? For each domain, the network fitted (with the shipped
    settings) on that domain's train questions alone against ``shared`` (fitted on every domain's), on that domain's
    validation and test questions; paired per question over all domains."""
    per_domain: dict[str, Any] = {}
    diffs: dict[str, list[np.ndarray]] = {"val": [], "test": []}
    for domain in sorted(set(domains["train"])):
        train = [g for g, d in zip(groups["train"], domains["train"], strict=True) if d == domain]
        if not train:
            continue
        try:
            own = fit_mlp(train, seed=SEED)
        except ValueError as exc:  # no train question of this domain has a candidate holding its answer
            per_domain[domain] = {"train": len(train), "skipped": str(exc)}
            continue
        per_domain[domain] = {"train": len(train)}
        for split in ("val", "test"):
            held = [g for g, d in zip(groups[split], domains[split], strict=True) if d == domain and len(g[1])]
            if not held:
                continue
            diffs[split].append(_differences(held, own, shared))
            per_domain[domain][split] = {"n": len(held), "own": rounded(picked_f1(held, own)), "shared": rounded(picked_f1(held, shared))}
        say(f"  {domain}'s own scorer: " + ", ".join(f"{split} {v['own']} against {v['shared']}" for split, v in per_domain[domain].items() if isinstance(v, dict)))
    return {"domains": per_domain, "paired": {split: _mean_se(np.concatenate(parts)) for split, parts in diffs.items() if parts},
            "how": "each domain's questions, scored by the network fitted on that domain's train questions and by the one fitted on every domain's"}


def save_network(network: Any, path: Path, provenance: dict[str, Any]) -> None:
    """``network`` (an ``MlpScorer``) as JSON in ``path``, with where it came from; written whole or not at all."""
    import json

    data = network.to_dict()
    data["report"] = {**data["report"], **provenance}
    # One line per key (the first layer one line per feature), so a refit reads as a diff of its numbers.
    lines = []
    for key, value in data.items():
        if key == "w1":
            rows = ",\n  ".join(json.dumps(row) for row in value)
            lines.append(f' "w1": [\n  {rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    tmp.replace(path)


def _paired(groups: list[Group], scorer: Any, against: Any) -> dict[str, float] | None:
    """The mean and standard error of each question's F1 under ``scorer`` minus under ``against``."""
    diff = _differences([g for g in groups if len(g[1])], load_scorer(scorer), load_scorer(against))
    return _mean_se(diff) if len(diff) >= 2 else None


def _differences(groups: list[Group], a: Any, b: Any) -> np.ndarray:
    """Each question's F1 of the sentence scorer ``a`` puts first minus that of ``b``'s."""
    return np.array([f[int(np.argmax(a.score(x)))] - f[int(np.argmax(b.score(x)))] for x, f in groups])


def _mean_se(diff: np.ndarray) -> dict[str, Any]:
    """Paired differences as the reports give them: mean, standard error (None for one) and count."""
    return {"mean": rounded(float(diff.mean())), "se": rounded(float(diff.std(ddof=1) / np.sqrt(len(diff)))) if len(diff) > 1 else None, "n": len(diff)}


def _gt(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a > b
