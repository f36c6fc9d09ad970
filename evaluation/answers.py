"""``manage.py evaluate answers``: the answers a person gets, per arm and generator, replayed through the product.

The dataset is loaded as a team would load it (``evaluation.workspace.load``) and every question is
asked through serving's chat path with its earlier user turns. Arms differ only in the ``model`` the
client names (``auto``, ``fast``, ``oracle``, ``flat``), generators only in ``GENERATOR``
(``extractive``, ``base``, ``lora``: adapters trained as the product trains them and activated only
past ``experts.services.answer_gate``). Figures are ``evaluation.scoring.summarise``'s; ``paired``
holds routed minus flat and minus oracle per question. ``--questions FILE`` adds ``fully_answered``;
out-of-scope rows give ``abstained_unanswerable``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.datasets import read_jsonl, stratified_sample, write_jsonl
from evaluation.scoring import Scored, paired, scored, summarise
from evaluation.workspace import Dataset, Loaded, Say, ask, load

MODES = ("flat", "auto", "oracle", "fast")
DEFAULT_MODES = ("flat", "auto", "oracle")
GENERATORS = ("extractive", "base", "lora")
MODEL = {"auto": "auto", "fast": "auto:fast"}  # the other arms name an expert
SEED = 0  # of every sample
# The default run fits ~45 minutes on a shared 2-core CPU with the three generators: a stratified sample of the split.
DEFAULT_LIMIT = 120
SAMPLES = 6  # questions whose answers the report shows in full


@dataclass
class AnswerConfig:
    """What one ``evaluate answers`` run does (the command's options)."""

    limit: int | None = DEFAULT_LIMIT
    split: str = "test"
    generators: tuple[str, ...] = GENERATORS
    modes: tuple[str, ...] = DEFAULT_MODES
    adapter_steps: int | None = None  # None: the training job's defaults decide
    questions_path: str | None = None  # rows {"question", "facts": [...], optional "domain"}: scored for fully_answered
    answers_path: str | None = None  # where to write every answer (JSON lines)
    passages: bool = False  # index passages.jsonl instead of docs.jsonl


@contextlib.contextmanager
def generating_with(generator: str) -> Iterator[None]:
    """The product configured to answer with ``generator``: ``GENERATOR`` set, its backend made afresh."""
    from django.test.utils import override_settings

    from experts.generation.registry import get_generator

    with override_settings(GENERATOR="extractive" if generator == "extractive" else "transformers"):
        get_generator.cache_clear()
        try:
            yield
        finally:
            get_generator.cache_clear()


def train_adapters(loaded: Loaded, steps: int | None, say: Say) -> dict[str, Any]:
    """Each expert's adapter as the product trains it (grounded examples, the training job, the answer gate); returns each job's result."""
    from experts import services as expert_services
    from experts.models import Expert
    from jobs.choices import JobStatus
    from labeling import services as labeling_services

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    for slug in sorted(loaded.experts.values()):
        expert = Expert.objects.get(slug=slug)
        examples = labeling_services.enqueue_grounded_examples(expert)
        examples.refresh_from_db()
        params = {**expert_services.default_training_params(), **({"max_steps": steps} if steps else {})}
        job = expert_services.start_adapter_training(expert, params, activate_if_better=True)
        job.refresh_from_db()
        if job.status != JobStatus.SUCCEEDED:
            out[slug] = {"status": job.status, "error": (job.error or "").splitlines()[:1]}
            say(f"  {slug}: adapter training {job.status}")
            continue
        r = job.result
        out[slug] = {"examples": examples.result, **{k: r.get(k) for k in ("version", "held_out_f1", "base_held_out_f1", "gate", "activated")}}
        say(f"  {slug}: adapter v{r.get('version')} held-out F1 {r.get('held_out_f1')} (base {r.get('base_held_out_f1')}), "
            + ("activated" if r.get("activated") else "not activated: the base model keeps answering"))
    out["train_s"] = round(time.perf_counter() - t0, 1)
    return out


def _questions(dataset: Dataset, config: AnswerConfig) -> tuple[list[dict[str, Any]], int]:
    """The split's questions with a reference answer (a stratified sample of ``config.limit``), and how many there were.
    A set without reference answers gives the split's questions with a domain: the figures that need no reference
    (words, junk, abstentions, the expert, citations where qrels exist) are scored, F1 and recall are None."""
    rows = dataset.questions(config.split)
    rows = [q for q in rows if q.get("answer")] or rows
    if not rows:
        raise ValueError(f"{dataset.name} has no {config.split} questions with a domain")
    available = len(rows)
    if config.limit is not None and config.limit < available:
        rows = [rows[i] for i in stratified_sample([q["domain"] for q in rows], config.limit, seed=SEED)]
    return rows, available


def _fact_questions(path: str) -> list[dict[str, Any]]:
    rows = []
    for i, row in enumerate(read_jsonl(Path(path)), start=1):
        text, facts = row.get("question") or row.get("text"), row.get("facts")
        if not text or not isinstance(facts, list) or not facts:
            raise ValueError(f"{path} line {i}: each row needs a 'question' and a non-empty list of 'facts'")
        rows.append({**row, "text": text, "query_id": row.get("query_id") or f"questions-{i}"})
    return rows


def evaluate_answers(folder: Path, config: AnswerConfig | None = None, say: Say = print) -> dict[str, Any]:
    """Replay ``folder``'s questions through the product for every arm and generator; returns the JSON-able report."""
    from knowledge.models import Document

    config = config or AnswerConfig()
    unknown = (set(config.generators) - set(GENERATORS)) | (set(config.modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown generators or modes {sorted(unknown)}; known: {', '.join(GENERATORS + MODES)}")
    started = time.perf_counter()
    dataset = Dataset.read(folder, passages=config.passages)
    if not dataset.documents:
        raise ValueError(f"{folder} has no documents to answer from (docs.jsonl: doc_id, domain, title, text)")
    questions, available = _questions(dataset, config)
    facts = _fact_questions(config.questions_path) if config.questions_path else []
    unanswerable = [q for q in dataset.queries if q.get("split") == "oos" and (q.get("text") or "").strip()][: len(questions)]
    say(f"{dataset.name}: {len(questions)} of {available} {config.split} questions, {len(facts)} with key facts, {len(unanswerable)} out of scope")
    loaded = load(dataset, flat="flat" in config.modes, say=say)
    external = dict(Document.objects.values_list("pk", "external_id"))

    def model_for(mode: str, q: dict[str, Any]) -> str | None:
        if mode in MODEL:
            return MODEL[mode]
        if mode == "flat":
            return loaded.flat
        return loaded.experts.get(q.get("domain") or "")  # oracle: the gold expert (none for a question without one)

    def asked(q: dict[str, Any], mode: str) -> Any:
        model = model_for(mode, q)
        return ask(q, model, loaded.scope(model))

    modes = [m for m in MODES if m in config.modes]
    results: dict[str, dict[str, Any]] = {m: {} for m in modes}
    rows: dict[tuple[str, str], list[Scored]] = {}
    adapters: dict[str, Any] = {}
    for generator in [g for g in GENERATORS if g in config.generators]:
        if generator == "lora":
            say("training each expert's adapter as the product does")
            adapters = train_adapters(loaded, config.adapter_steps, say)
        with generating_with(generator):
            for mode in modes:
                t0 = time.perf_counter()
                got = [scored(asked(q, mode), q, external, loaded.experts.get(q["domain"], ""), dataset.relevant.get(str(q.get("query_id"))))
                       for q in questions]
                rows[(mode, generator)] = got
                figures = summarise(got)
                if facts and (mode != "oracle" or all(q.get("domain") in loaded.experts for q in facts)):
                    fact_rows = [scored(asked(q, mode), q, external, loaded.experts.get(q.get("domain") or "", "")) for q in facts]
                    figures["questions"] = summarise(fact_rows)
                    rows[(mode, f"{generator}/questions")] = fact_rows
                if unanswerable and mode != "oracle":
                    figures["abstained_unanswerable"] = summarise([scored(asked(q, mode), q, external) for q in unanswerable])["abstained"]
                results[mode][generator] = figures
                say(f"  {mode:7s} {generator:10s} F1 {figures['f1']}  recall {figures['recall']}  words {figures['words']}  "
                    f"junk {figures['junk_rate']}  abstained {figures['abstained']}  ({time.perf_counter() - t0:.0f} s)")
    comparisons: dict[str, Any] = {}
    for generator in config.generators:
        for a, b in (("auto", "flat"), ("auto", "oracle"), ("fast", "auto")):
            if (a, generator) in rows and (b, generator) in rows:
                comparisons[f"{a}/{generator} - {b}/{generator}"] = {m: paired(rows[(a, generator)], rows[(b, generator)], m) for m in ("f1", "recall")}
    report: dict[str, Any] = {
        "pipeline": "product",
        "results": results,
        "paired": comparisons,
        "n_questions": len(questions),
        "wall_s": round(time.perf_counter() - started, 1),
        "router": {"version": loaded.router_version, "val_accuracy": loaded.router_metrics.get("val", {}).get("accuracy"),
                   "knowledge": loaded.router_metrics.get("knowledge", {}).get("fitted")},
        "adapters": adapters,
        "workspace": loaded.seconds,
        "samples": [{"question": q["text"], "gold": q.get("answer"), "domain": q["domain"],
                     "answers": {f"{m}/{g}": r[k].answer for (m, g), r in rows.items() if "/" not in g}}
                    for k, q in enumerate(questions[:SAMPLES])],
        "setup": {"dataset": dataset.name, "split": config.split, "questions_available": available, "limit": config.limit,
                  "sample": f"stratified by domain, seed {SEED}" if len(questions) < available else "all",
                  "reference_answers": sum(bool(q.get("answer")) for q in questions),
                  "modes": modes, "generators": list(config.generators), "documents": "passages.jsonl" if config.passages else "docs.jsonl",
                  "history": "the user's earlier turns, as a client sends them", "questions_file": config.questions_path},
    }
    if config.answers_path:
        write_jsonl(Path(config.answers_path), [{"arm": f"{m}/{g}", **r.as_row()} for (m, g), got in rows.items() for r in got])
        say(f"  every answer written to {config.answers_path}")
    return report
