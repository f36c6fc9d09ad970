"""``manage.py evaluate answers``: how good the answers are, per retrieval mode and per generator.

The run's steps live apart: ``answers_corpus`` indexes the documents, routes and searches the questions,
``answers_training`` trains the adapters, ``answers_generation`` answers and ``answers_scoring`` scores;
``answers_config`` holds the options (``AnswerConfig``). This module runs them in order.

Questions are the test split's user turns (``--split val`` evaluates on val: that is where defaults
are chosen) whose records carry a gold ``answer``; each is answered from the dataset's documents,
chunked and indexed as an expert's are (one temporary collection per domain), through the
product's own code: the serving search (``knowledge.search.search_collections``,
``RETRIEVAL_TOP_K`` chunks, hybrid), the product's router as served (``evaluation.abstentions.product_routes``:
trained on the train split as ``evaluate router`` trains it; a follow-up it is unsure of alone is
ranked with the user's earlier turns, ``routing.ml.conversation``, and the expert those turns route
to is kept as serving keeps it for a request that sends its messages; the same as ``evaluate retrieval``), the
prompt builder (``experts.ml.prompting`` through ``lora_examples.fit_prompt``), the extractive answer and
the LoRA training function with the product's parameters (``LoraParams``' defaults).

Modes (which passages, and which adapter answers):

* ``flat``: one search over every domain's collection; the pooled *generalist* adapter.
* ``auto``: the router's top two domains weighted by its probabilities and widened with what it
  leaves over (the ``auto`` chat mode); the adapter of the expert whose passage ranks first when it
  is one of the two, else of the router's first (what ``serving.chat`` does).
* ``oracle``: the gold domain's collection alone, and that domain's adapter.

Generators: ``extractive`` (``experts.ml.extractive``, no LM), ``base`` (the bare ``BASE_MODEL``)
and ``lora`` (the mode's adapter). The LM generators do what the serving backend does around the
model (``experts.generation.transformers``, read through its ``from_settings``): a weak retrieval
is answered "not found" without calling the model, the model sees the best ``prompting.SHOWN_PASSAGES``
passages cut to their ``prompting.PASSAGE_CHARS`` most relevant characters, answers as
``selection.DECODING`` says (``select``: the passage sentence the model rates best; ``free``: greedy
decoding up to ``GENERATOR_MAX_TOKENS``, stopping at serving's stops), and its output goes through the
same ``parse_answer``. What differs is batching (``experts.ml.batch_generation``: left-padded batches
for free decoding, where serving answers one request at a time); the weights' dtype is serving's (``GENERATION_DTYPE``:
bfloat16 where the hardware multiplies it natively, as training uses). Every mode searches as serving
does: a follow-up question's query is widened with the user's own earlier turns (``RETRIEVAL_CONTEXT_WEIGHT``,
``knowledge.ml.conversation``; never the agent's), the generalist's flat search too; the prompt holds the question alone.
As in ``serving.chat``, a follow-up the product's router abstains on (its in-scope score reads the
question alone: a change of subject) is searched as asked; the abstentions are that router's
(with the documents as evidence as training fits them). Every mode gets the same ones: the in-scope check is the platform's
"is this about anything we know", which reads no routing, and a generalist held to the same honesty
leaves the same follow-ups' conversation out (``fast`` too, rather than the fast tier's own check).

Adapters learn on the train split only. Training examples are built as the product builds them
(``labeling.grounding``): each question is searched in its own domain's collection, weak
retrievals (best passage below ``EXTRACTIVE_MIN_SCORE``) are skipped, and the target is the gold
answer cited to the passage that holds it (``experts.ml.targets``; questions whose passages do not
hold it are skipped too). One *pooled* adapter learns on every domain's examples for
``pooled_steps``; each domain's expert continues from it on its own examples for
``expert_steps``; the generalist continues from it on every domain's examples for as many steps as
the experts took together (``domains x expert_steps``), so it gets the same data and the same total
compute. Adapters are cached under ``<cache>/answers/adapters`` by a fingerprint of the base model,
the parameters, the examples, the adapter they start from and the training code.

Figures (``results[mode][generator]``): ``f1`` (SQuAD-normalised token F1, citation markers
removed, an abstention scored as the empty answer), ``rouge_l`` (LCS F1 on the same words),
``citation_precision`` (share of cited passages from a gold-relevant document, over the answers
citing any, where qrels exist), ``abstained`` (share answering "not found"), and on questions whose
gold answer is in none of the retrieved passages (``absent``) and those where it is, the share that
abstained (``abstained_when_absent``: honest; ``abstained_when_present``: lost). ``p50_ms`` is the
median time per answer (a batch's wall time divided by its size for the LMs) and ``tokens_per_s``
the generated tokens per second of generation. ``paired`` holds the targets' comparisons as mean
per-question F1 differences with their standard errors (``paired_differences``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.answers_config import GENERATORS, MODES, SEED, AnswerConfig, Say
from evaluation.answers_corpus import Question, index_corpus, mode_plans, route_questions, search_passages
from evaluation.answers_generation import Answered, Serving, extractive_answers, generate_answers
from evaluation.answers_scoring import answer_f1s, answer_rows, compute_targets, paired_differences, say_table, score_answers
from evaluation.answers_training import train_adapters
from evaluation.datasets import dataset_embeddings, read_jsonl, search_contexts, stratified_sample, write_jsonl
from experts.generation.extractive import scorer_spec
from experts.ml.targets import MIN_SUPPORT
from knowledge.search import context_weight, weight_power, widen_below, widens

SAMPLES = 6  # questions whose answers the report shows in full


def evaluate_answers(dataset: Path, config: AnswerConfig | None = None, say: Say = print) -> dict[str, Any]:
    """Answer quality of every mode and generator (see the module docstring); returns the JSON-able report."""
    import torch
    from django.conf import settings

    from experts.ml.batch_generation import attach_adapters
    from experts.ml.loading import load_base

    config = config or AnswerConfig()
    unknown = (set(config.generators) - set(GENERATORS)) | (set(config.modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown generators or modes {sorted(unknown)}; known: {', '.join(GENERATORS + MODES)}")
    modes = [m for m in MODES if m in config.modes]
    started = time.perf_counter()
    dataset = Path(dataset)
    model = settings.EMBEDDING_MODEL
    encoding = {"threads": max(1, settings.TORCH_THREADS), "batch_size": 64}
    top_k, min_score = int(settings.RETRIEVAL_TOP_K), float(settings.EXTRACTIVE_MIN_SCORE)
    units = read_jsonl(dataset / "docs.jsonl")
    relevant: dict[str, set[str]] = defaultdict(set)
    if (dataset / "qrels.jsonl").exists():
        for row in read_jsonl(dataset / "qrels.jsonl"):
            relevant[row["query_id"]].add(row["doc_id"])
    say(f"{dataset.name}: answers on the {config.split} split")
    corpus = index_corpus(dataset, units, say, encoding)
    queries, qx = dataset_embeddings(dataset, model, say, **encoding)
    y = np.array([corpus.domains.index(q["domain"]) if q.get("domain") in corpus.domains else -1 for q in queries])
    routes, train_rows, val_rows = route_questions(dataset, queries, qx, y, corpus.domains, say, encoding)
    probs, router_report = routes.probs, routes.report
    # Every mode searches as serving does: a follow-up widened with the user's earlier turns (the generalist too: the same information).
    contexts = search_contexts(dataset, queries, model, context_weight(), say, **encoding)
    ctx = {"corpus": corpus, "queries": queries, "qx": qx, "y": y, "train_rows": train_rows, "val_rows": val_rows,
           "top_k": top_k, "min_score": min_score, "max_sentences": int(settings.EXTRACTIVE_MAX_SENTENCES),
           "scorer_spec": scorer_spec(settings), "model": model, "threads": encoding["threads"]}

    wanted = set(val_rows) if config.split == "val" else None
    candidates = [i for i, q in enumerate(queries) if q.get("split") == config.split and y[i] >= 0 and q.get("answer") is not None and q.get("text")
                  and (wanted is None or i in wanted)]
    if not candidates:
        raise ValueError(f"{dataset} has no {config.split} questions with an 'answer' and a known domain")
    available = len(candidates)
    if config.limit is not None and config.limit < len(candidates):
        pick = stratified_sample([str(y[i]) for i in candidates], config.limit, seed=SEED)
        candidates = [candidates[j] for j in pick]
    threshold = widen_below()
    abstained = {i for i in candidates if i in routes.abstained and contexts[i] is not None}
    router_report["follow_ups_searched_alone"] = len(abstained)  # the product's router abstained on them: searched as asked
    router_report["follow_ups_ranked_with_conversation"] = sum(i in routes.with_conversation for i in candidates)
    router_report["no_expert_on_these"] = sum(routes.served.get(i) == [] for i in candidates)  # auto: no passages, scored as a refusal
    fast_x = fast_probs = None
    if "fast" in modes:  # the fast tier as router training makes it (its encoder also learns the documents' sentences)
        from evaluation.fast_tier import fast_tier_vectors

        fast_x, fast_probs, router_report["fast"] = fast_tier_vectors(queries, qx, np.maximum(y, 0), train_rows, val_rows, len(corpus.domains), model,
                                                                      [u.get("text") or "" for u in units], dataset.name, SEED, say)
        if fast_probs is None:
            raise ValueError(f"mode 'fast' needs the fast tier: {router_report['fast']['reason']}")
    questions: list[Question] = []
    for i in candidates:
        q = Question(i, queries[i]["text"], str(queries[i]["answer"]), int(y[i]), relevant.get(queries[i]["query_id"], set()))
        asked = None if i in abstained else contexts[i]  # a follow-up the router abstains on is searched alone, as served
        plans = mode_plans(q, probs[i], corpus, threshold, fast_probs[i] if fast_probs is not None else None, routes.served.get(i), widens(asked))
        for mode, (plan, order) in plans.items():
            if mode not in modes:
                continue
            if mode == "auto" and routes.served.get(i) == []:
                # Served "No expert covers this question": nothing is searched, scored as a refusal.
                q.passages[mode], q.adapter[mode] = [], ""
                continue
            context = asked
            if mode == "fast" and context is not None:  # the fast tier's vector is in another space: the turns' words only (serving.chat)
                context = dataclasses.replace(context, vectors=None)
            q.passages[mode] = search_passages(corpus, plan, fast_x[i] if mode == "fast" else qx[i], q.text, top_k, context)
            if mode == "fast":  # auto:fast asks its one expert (serving.chat, width 1)
                q.adapter[mode] = corpus.domains[order[0]]
            elif mode == "auto":  # the expert owning the first passage answers when it is one of the two routed (serving.chat)
                leading = q.passages[mode][0].expert if q.passages[mode] else ""
                chosen = [corpus.domains[j] for j in order]
                q.adapter[mode] = leading if leading in chosen else chosen[0]
            else:
                q.adapter[mode] = corpus.domains[q.domain] if mode == "oracle" else "generalist"
        questions.append(q)
    say(f"  {len(questions)} of {available} questions, {top_k} passages each")
    router_report["top1_correct_on_these"] = round(float(np.mean([int(np.argmax(probs[q.row])) == q.domain for q in questions])), 4)
    if "auto" in modes:
        router_report["auto_adapter_is_gold"] = round(float(np.mean([q.adapter["auto"] == corpus.domains[q.domain] for q in questions])), 4)
    if "fast" in modes:
        router_report["fast_adapter_is_gold"] = round(float(np.mean([q.adapter["fast"] == corpus.domains[q.domain] for q in questions])), 4)

    answers: dict[tuple[str, str], list[Answered]] = {}
    if "extractive" in config.generators:
        known = {mode: {queries[q.row]["text"]: (fast_x if mode == "fast" else qx)[q.row] for q in questions} for mode in modes}
        for mode, rows in extractive_answers(questions, modes, known, ctx).items():
            answers[(mode, "extractive")] = rows
    adapters_report: dict[str, Any] = {}
    lm_generators = [g for g in ("base", "lora") if g in config.generators]
    dtype = None
    serving = Serving(config.max_new_tokens)
    if lm_generators:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(config.dtype) or serving.generator.torch_dtype()
        tokenizer, base = load_base(settings.BASE_MODEL, dtype=dtype)
        base.eval()
        folders: dict[str, Path] = {}
        if "lora" in lm_generators:
            folders, adapters_report = train_adapters(config, ctx, tokenizer, serving, say)
        lm = attach_adapters(base, {k: str(v) for k, v in folders.items()}, settings.BASE_MODEL)
        for generator in lm_generators:
            for mode, rows in generate_answers(generator, lm, tokenizer, questions, modes, set(folders), serving, config, say).items():
                answers[(mode, generator)] = rows
    corpus.close()

    results: dict[str, dict[str, Any]] = {mode: {} for mode in modes}
    for (mode, generator), rows in answers.items():
        results[mode][generator] = score_answers(questions, mode, rows, corpus.units)
    report: dict[str, Any] = {
        "results": results,
        "n_questions": len(questions),
        "train_s": adapters_report.get("train_s", 0.0),
        "n_train": adapters_report.get("n_train", 0),
        "train_s_this_run": adapters_report.get("train_s_this_run", 0.0),
        "wall_s": round(time.perf_counter() - started, 1),
        "targets": compute_targets(results),
        "paired": paired_differences({key: answer_f1s(questions, rows) for key, rows in answers.items()}),
        "samples": [
            {"question": q.text, "gold": q.gold, "domain": corpus.domains[q.domain],
             "answers": {f"{mode}/{generator}": rows[k].raw or rows[k].text for (mode, generator), rows in answers.items()}}
            for k, q in enumerate(questions[:SAMPLES])
        ],
        "router": router_report,
        "adapters": adapters_report,
        "setup": {
            "dataset": dataset.name, "split": config.split, "questions_available": available, "limit": config.limit,
            "sample": f"stratified by domain, seed {SEED}" if len(questions) < available else "all",
            "train_limit": config.train_limit, "modes": modes, "base_model": settings.BASE_MODEL,
            "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
            "retrieval_top_k": top_k, "min_score": min_score, "extractive_max_sentences": int(settings.EXTRACTIVE_MAX_SENTENCES),
            "extractive_sentence_scorer": ctx["scorer_spec"],
            "widen_below": threshold, "weight_power": weight_power(), "context_weight_power": weight_power(widened=True), "chunks": corpus.chunks,
            "prompt_passages": serving.generator.max_passages, "prompt_passage_chars": serving.generator.passage_chars,
            "max_new_tokens": serving.max_new_tokens, "stop_at_paragraph": serving.generator.stop_at_paragraph,
            "decoding": serving.generator.decoding,
            "select_shortlist": serving.generator.select_shortlist if serving.generator.decoding == "select" else None,
            "lead_sentence": serving.generator.lead_sentence,
            "batch_size": config.batch_size, "gold_support_threshold": MIN_SUPPORT, "history_in_prompt": False,
            "search_context_weight": context_weight(), "questions_with_earlier_turns": sum(contexts[q.row] is not None for q in questions),
        },
    }
    say_table(results, say)
    if config.answers_path:
        write_jsonl(Path(config.answers_path), answer_rows(questions, answers, queries, corpus))
        say(f"  every answer written to {config.answers_path}")
    return report
