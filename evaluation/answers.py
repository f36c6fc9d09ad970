"""``manage.py evaluate answers``: how good the answers are, per retrieval mode and per generator.

Long because one run indexes, routes, builds training examples, trains adapters and generates, and
those steps share the same question records; each step is its own function.

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
import hashlib
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.abstentions import ProductRoutes, product_routes
from evaluation.datasets import (
    cached_embeddings,
    code_fingerprint,
    dataset_embeddings,
    embedding_cache_dir,
    index_by_domain,
    read_jsonl,
    search_contexts,
    stratified_sample,
    write_jsonl,
)
from experts.generation.extractive import scorer_spec
from experts.ml.answer_metrics import is_abstention, paired_difference, rouge_l, support, token_f1
from experts.ml.extractive import ChunkSentenceCache, Passage, extractive_answer, split_sentences
from experts.ml.prompting import DEFAULT_CITATION_FORMAT, parse_answer
from experts.ml.targets import MIN_SUPPORT, gold_target
from experts.models import Expert
from knowledge.ml.chunking import chunk_text
from knowledge.ml.conversation import SearchContext, expand_query
from knowledge.ml.routed import routing_weights
from knowledge.ml.sparse import bm25_vector
from knowledge.points import embedding_text
from knowledge.search import context_weight, search_collections, weight_power, widen_below, widens
from knowledge.stores.base import Hit
from knowledge.stores.embedded import EmbeddedQdrantStore

MODES = ("flat", "auto", "oracle", "fast")
DEFAULT_MODES = ("flat", "auto", "oracle")  # "fast" (auto:fast with the fast tier) on request: it trains the tier
GENERATORS = ("extractive", "base", "lora")
BATCH_SIZE = 8
HELD_OUT = 8  # val examples per adapter for its held-out loss (the loss is a by-product; F1 is the figure)
SEED = 0
SAMPLES = 6  # questions whose answers the report shows in full
# The default run (chosen to fit ~45 minutes on a shared 2-core CPU, see docs/EVALUATIONS.md): a stratified
# sample of the test questions, and the training steps below. The steps were chosen on doc2dial's
# validation split (`--split val --modes auto --generators extractive,lora`, 120 questions): routed
# LoRA F1 0.159 with 40 + 10 steps, 0.206 with 80 + 20 (extractive 0.195): the adapters were
# undertrained. Measured again with select decoding on all 417 validation questions (2026-12-05,
# `--split val --limit 0 --modes auto --generators lora`): 0.3299 with 80 + 20, 0.3263 with 160 + 40.
# Adapters are cached by fingerprint, so a rerun pays for generation only.
DEFAULT_LIMIT = 120
DEFAULT_POOLED_STEPS = 80
DEFAULT_EXPERT_STEPS = 20

Say = Callable[[str], Any]


@dataclass
class AnswerConfig:
    """What one ``evaluate answers`` run does (the command's options)."""

    limit: int | None = DEFAULT_LIMIT
    train_limit: int | None = None
    split: str = "test"
    generators: tuple[str, ...] = GENERATORS
    modes: tuple[str, ...] = DEFAULT_MODES
    pooled_steps: int = DEFAULT_POOLED_STEPS
    expert_steps: int = DEFAULT_EXPERT_STEPS  # 0: no continuation (experts and generalist are the pooled adapter)
    lora: dict[str, Any] = field(default_factory=dict)  # LoraParams fields over the product's (for choosing them on val)
    max_new_tokens: int | None = None  # None: GENERATOR_MAX_TOKENS, as serving
    batch_size: int = BATCH_SIZE
    dtype: str = "auto"  # auto: serving's (GENERATION_DTYPE)
    answers_path: str | None = None  # where to write every question's answers (JSON lines, ``answer_rows``)


@dataclass
class Corpus:
    domains: list[str]
    names: list[str]
    units: list[dict[str, Any]]
    store: EmbeddedQdrantStore
    root: str
    sentence_blocks: dict[int, np.ndarray]  # chunk row -> its sentence vectors (as indexing stores them)
    chunks: int
    index_s: float

    def close(self) -> None:
        import shutil

        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def passages(self, hits: list[Hit]) -> list[Passage]:
        """Hits as the serving path's passages (``serving.chat._to_passages``), index-time sentence vectors included."""
        out = []
        for h in hits:
            block = self.sentence_blocks.get(h.payload["chunk"])  # by payload: the store may rewrite point ids
            out.append(Passage(
                text=h.payload["text"], title=h.payload["title"], score=h.dense_score, expert=h.payload["domain"],
                document_id=h.payload["document_id"], chunk_id=h.id, sentence_vectors=(lambda b=block: b) if block is not None else None,
            ))
        return out


@dataclass
class _Answered:
    text: str  # "" for an abstention
    citations: list[Passage]
    ms: float
    new_tokens: int = 0
    raw: str = ""  # what the model wrote, before parsing
    sentence_score: float | None = None  # the extractive scorer's score of the best sentence (extractive answers)


@dataclass
class Question:
    row: int
    text: str
    gold: str
    domain: int
    relevant: set[str]
    passages: dict[str, list[Passage]] = field(default_factory=dict)  # by mode
    adapter: dict[str, str] = field(default_factory=dict)  # by mode: the lora generator's adapter


def index_corpus(dataset: Path, units: list[dict[str, Any]], say: Say, encoding: dict[str, int]) -> Corpus:
    """Chunk, embed (cached) and index the documents into one collection per domain, with each chunk's sentence vectors."""
    from django.conf import settings

    model = settings.EMBEDDING_MODEL
    domains = sorted({u["domain"] for u in units})
    size = int(Expert._meta.get_field("chunk_size").default)
    overlap = int(Expert._meta.get_field("chunk_overlap").default)
    chunks = [(i, c.text) for i, u in enumerate(units) for c in chunk_text(u["text"], size=size, overlap=overlap)]
    cx = cached_embeddings(f"{dataset.name}-chunks-{size}-{overlap}", [embedding_text(units[i]["title"], t) for i, t in chunks], model, say, **encoding)
    sentences = [split_sentences(t) for _, t in chunks]
    flat = [s for group in sentences for s in group]
    sx = cached_embeddings(f"{dataset.name}-chunk-sentences-{size}-{overlap}", flat, model, say, **encoding) if flat else np.zeros((0, cx.shape[1]))
    blocks: dict[int, np.ndarray] = {}
    offset = 0
    for row in range(len(chunks)):
        block = sx[offset : offset + len(sentences[row])]
        offset += len(sentences[row])
        if len(block):
            blocks[row] = block

    def payload(i: int, row: int, text: str) -> dict[str, Any]:
        unit = units[i]
        return {"document_id": i, "chunk": row, "unit": unit["doc_id"], "domain": unit["domain"], "title": unit.get("title") or "", "text": text}

    store, root, index_s = index_by_domain(chunks, units, cx, "answers-eval-", payload)
    say(f"  indexed {len(chunks):,} chunks of {len(units):,} documents into {len(domains)} collections in {index_s:.1f} s")
    return Corpus(domains, [f"eval_{d}" for d in domains], units, store, root, blocks, len(chunks), index_s)


def route_questions(dataset: Path, queries: list[dict[str, Any]], qx: np.ndarray, y: np.ndarray, domains: list[str], say: Say,
                    encoding: dict[str, int]) -> tuple[ProductRoutes, list[int], list[int]]:
    """The product's routing of every question with a known domain (``evaluation.abstentions.product_routes``), and the train and val rows."""
    from django.conf import settings

    from evaluation.retrieval import split_rows

    train, val, _, validation = split_rows(queries, y, {})
    routes = product_routes(dataset, queries, qx, [i for i in range(len(queries)) if y[i] >= 0 and queries[i].get("text")], domains,
                            settings.EMBEDDING_MODEL, say, SEED, encoding)
    routes.report["validation"] = validation
    return routes, train, val


def search_passages(corpus: Corpus, plan: dict[str, float], dense: np.ndarray, question: str, limit: int,
                    context: SearchContext | None = None) -> list[Passage]:
    """The serving search's passages for ``question`` (with ``context``: widened with the user's earlier turns, as served)."""
    searched, indices, values = expand_query(dense, *bm25_vector(question, query=True), context)
    return corpus.passages(search_collections(corpus.store, plan, searched.tolist(), indices, values, limit=limit, method="hybrid"))


def mode_plans(q: Question, probs: np.ndarray, corpus: Corpus, threshold: float,
               fast_probs: np.ndarray | None = None, served: list[int] | None = None, widened: bool = False) -> dict[str, tuple[dict[str, float], list[int]]]:
    """Each mode's collection weights and the domains (best first) whose adapter may answer.

    ``fast_probs``: the fast tier's probabilities for this question; with them, ``fast`` is
    ``auto:fast`` as served (its top expert, widened with what it leaves over). ``served``: the
    candidates in serving's order (``ProductRoutes.served``: the conversation's expert kept first,
    or alone for a question the router abstains on); ``auto`` searches its first two. Without it
    (or empty: no expert would answer; ``evaluate answers`` then searches nothing), the router's
    two most probable. ``widened``: the search reads the conversation's earlier turns (the router's
    weights then count as serving counts them there: ``weight_power(widened=True)``).
    """
    names = corpus.names
    power = weight_power(widened)
    order = list(served[:2]) if served else [int(j) for j in np.argsort(-probs)[:2]]
    routed = routing_weights([names[j] for j in order], [float(probs[j]) for j in order], names, threshold, power=power)
    plans = {"flat": (dict.fromkeys(names, 1.0), []), "auto": (routed, order), "oracle": ({names[q.domain]: 1.0}, [q.domain])}
    if fast_probs is not None:
        top = int(np.argmax(fast_probs))
        plans["fast"] = (routing_weights([names[top]], [float(fast_probs[top])], names, threshold, power=power), [top])
    return plans


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _base_model_identity(base_model: str) -> dict[str, Any]:
    from experts.ml.loading import resolve_base_model

    folder = Path(resolve_base_model(base_model))
    return {"config": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:16],
            "weights": sorted((p.name, p.stat().st_size) for p in folder.glob("*.safetensors"))}


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


class _Adapters:
    """Trains adapters through ``lora.train_lora`` once per fingerprint and keeps their records.

    The fingerprint covers the base model, the parameters, the token ids the adapter learns from
    (so a change of the prompt builder is a miss, not a stale adapter), the adapter it starts from
    and the training code.
    """

    def __init__(self, base_model: str, tokenizer: Any, say: Say):
        from experts.ml import loading, lora, lora_examples

        self.base_model, self.tokenizer, self.say = base_model, tokenizer, say
        self.root = embedding_cache_dir().parent / "answers" / "adapters"
        self.identity = {"base": _base_model_identity(base_model), "code": code_fingerprint(lora, lora_examples, loading)}
        self.records: dict[str, dict[str, Any]] = {}
        self.train_s_now = 0.0

    def train(self, label: str, examples: list[Any], held_out: list[Any], params: Any, init: Path | None = None) -> Path:
        from experts.ml.lora import train_lora
        from experts.ml.lora_examples import encode_example

        data = hashlib.sha256(json.dumps([encode_example(self.tokenizer, e, params.max_length) for e in examples]).encode()).hexdigest()
        key = _fingerprint(self.identity, params.as_dict(), data, init.name if init else None)
        folder = self.root / f"{label}-{key}"
        record_path = folder / "record.json"
        if record_path.is_file():
            self.records[label] = json.loads(record_path.read_text())
            self.say(f"  adapter {label}: cached ({folder.name})")
            return folder
        self.say(f"  adapter {label}: training {params.max_steps} steps on {len(examples)} examples" + (f" from {init.name}" if init else ""))
        t0 = last = time.perf_counter()

        def on_step(step: int, total: int, loss: float) -> None:
            nonlocal last
            if step == total or time.perf_counter() - last > 60:
                last = time.perf_counter()
                self.say(f"    {label}: step {step}/{total}, loss {loss:.3f}, {last - t0:.0f} s")

        work = Path(tempfile.mkdtemp(prefix=f"answers-{label}-"))
        result = train_lora(self.base_model, examples, held_out, params, folder, work, on_step=on_step, init_adapter=init)
        seconds = time.perf_counter() - t0
        self.train_s_now += seconds
        self.records[label] = {
            "label": label, "fingerprint": key, "steps": result.steps, "n_train": len(examples), "train_s": round(seconds, 1),
            "train_loss": _r(result.train_loss), "held_out_loss": _r(result.eval_loss), "base_held_out_loss": _r(result.base_eval_loss),
            "started_from": init.name if init else None, "loss_curve": result.loss_curve,
        }
        record_path.write_text(json.dumps(self.records[label], indent=2))
        return folder


class _Serving:
    """What the serving LLM backend does around the model (``experts.generation.transformers``), for batched use.

    The passages it shows (``prompt_passages``), when it does not call the model at all (weak
    retrieval), its token limit, stops and answer parsing.
    """

    def __init__(self, max_new_tokens: int | None):
        from experts.generation.transformers import TransformersGenerator

        self.generator = TransformersGenerator.from_settings()
        self.max_new_tokens = int(max_new_tokens or self.generator.max_tokens)

    def shown(self, question: str, passages: list[Passage]) -> list[Passage]:
        from experts.generation.base import GenerationRequest

        return self.generator.prompt_passages(GenerationRequest(question=question, expert="", passages=passages))

    def weak(self, passages: list[Passage]) -> bool:
        return not passages or max(p.score for p in passages) < self.generator.min_score

    @property
    def stops(self) -> tuple[str, ...]:
        from experts.ml.prompting import STOPS

        return STOPS + (("\n\n",) if self.generator.stop_at_paragraph else ())

    def parse(self, text: str, question: str, passages: list[Passage]) -> Any:
        from experts.ml.prompting import STOPS

        return parse_answer(text, passages[: self.generator.max_passages], citation_format=DEFAULT_CITATION_FORMAT, min_score=self.generator.min_score,
                            question=question, stops=STOPS, stop_at_paragraph=self.generator.stop_at_paragraph)


def _training_examples(corpus: Corpus, queries: list[dict[str, Any]], qx: np.ndarray, rows: list[int], y: np.ndarray, tokenizer: Any,
                       params: Any, serving: _Serving, top_k: int) -> tuple[dict[int, list[Any]], dict[str, int]]:
    """Examples per domain the way ``labeling.grounding`` builds them: own-domain search, weak skipped, gold answer cited.

    The prompt holds the passages serving would show for that search (``_Serving.shown``); the
    target cites the one holding the gold answer among those that fit ``max_length``.
    """
    from experts.ml.lora_examples import Example, fitted_passages

    out: dict[int, list[Any]] = defaultdict(list)
    counts = {"questions": len(rows), "weak": 0, "unsupported": 0, "kept": 0}
    for i in rows:
        question, answer = queries[i]["text"], " ".join(str(queries[i].get("answer") or "").split())
        passages = search_passages(corpus, {corpus.names[y[i]]: 1.0}, qx[i], question, top_k)
        if not answer:
            counts["unsupported"] += 1
            continue
        if serving.weak(passages):
            counts["weak"] += 1
            continue
        shown = serving.shown(question, passages)
        answer_room = len(tokenizer(answer, add_special_tokens=False)["input_ids"]) + 6  # the marker and the end token
        fit = fitted_passages(tokenizer, Example(question, answer, shown), params.max_length - answer_room)
        target = gold_target(answer, shown[:fit])
        if target is None:
            counts["unsupported"] += 1
            continue
        out[int(y[i])].append(Example(question, target, shown, whole=passages[: serving.generator.max_passages]))
        counts["kept"] += 1
    return out, counts


def _lora_params(config: AnswerConfig) -> Any:
    """The product's training parameters (``LoraParams``' defaults, QLoRA and bfloat16 as the settings say), with the run's overrides."""
    from django.conf import settings

    from experts.ml.lora import LoraParams

    return LoraParams.from_dict({**LoraParams(qlora=settings.LORA_QLORA, bf16=settings.LORA_BF16, seed=SEED).as_dict(), **config.lora})


def _with_steps(params: Any, steps: int) -> Any:
    from experts.ml.lora import LoraParams

    return LoraParams.from_dict({**params.as_dict(), "max_steps": max(1, steps)})


def _train_adapters(config: AnswerConfig, ctx: dict[str, Any], tokenizer: Any, serving: _Serving, say: Say) -> tuple[dict[str, Path], dict[str, Any]]:
    """Pooled adapter, one expert per domain continuing from it, and the generalist with the experts' total steps."""
    from django.conf import settings

    corpus, queries, qx, y = ctx["corpus"], ctx["queries"], ctx["qx"], ctx["y"]
    params = _lora_params(config)
    rows = list(ctx["train_rows"])
    if config.train_limit is not None and config.train_limit < len(rows):
        rows = [rows[j] for j in stratified_sample([str(y[i]) for i in rows], config.train_limit, seed=SEED)]
    by_domain, counts = _training_examples(corpus, queries, qx, rows, y, tokenizer, params, serving, ctx["top_k"])
    held, _ = _training_examples(corpus, queries, qx, list(ctx["val_rows"]), y, tokenizer, params, serving, ctx["top_k"])
    pooled = [e for d in sorted(by_domain) for e in by_domain[d]]
    pooled_held = [e for d in sorted(held) for e in held[d][: max(1, HELD_OUT // len(corpus.domains))]]
    say(f"  training examples: {counts} ({', '.join(f'{corpus.domains[d]} {len(v)}' for d, v in sorted(by_domain.items()))})")
    trainer = _Adapters(settings.BASE_MODEL, tokenizer, say)
    steps = {"pooled": config.pooled_steps, "expert": config.expert_steps, "generalist": config.expert_steps * len(by_domain)}
    start = trainer.train("pooled", pooled, pooled_held, _with_steps(params, config.pooled_steps))
    folders: dict[str, Path] = {}
    for d in sorted(by_domain):
        folders[corpus.domains[d]] = start if not config.expert_steps else trainer.train(
            f"expert-{corpus.domains[d]}", by_domain[d], held.get(d, [])[:HELD_OUT], _with_steps(params, config.expert_steps), init=start)
    if "flat" in config.modes:  # only the flat mode answers with the generalist
        folders["generalist"] = start if not config.expert_steps else trainer.train(
            "generalist", pooled, pooled_held, _with_steps(params, steps["generalist"]), init=start)
    report = {
        "steps": steps, "params": params.as_dict(), "records": trainer.records, "examples": counts, "n_train": len(pooled),
        "n_train_by_domain": {corpus.domains[d]: len(v) for d, v in sorted(by_domain.items())},
        "train_s": round(sum(r["train_s"] for r in trainer.records.values()), 1), "train_s_this_run": round(trainer.train_s_now, 1),
    }
    return folders, report


def _extractive(questions: list[Question], modes: list[str], known: dict[str, dict[str, np.ndarray]], ctx: dict[str, Any]) -> dict[str, list[_Answered]]:
    """The extractive generator's answers (``experts.ml.extractive``, as ``ExtractiveGenerator`` calls it).

    ``known``: by mode, each question's vector (``fast``: the fast tier's, as serving hands it over).
    """
    from encoders import get_encoder

    encoder = get_encoder(ctx["model"], ctx["threads"])
    cache = ChunkSentenceCache(size=100_000)
    out: dict[str, list[_Answered]] = {}
    for mode in modes:
        vectors = known[mode]

        def embed(texts: list[str], vectors: dict[str, np.ndarray] = vectors) -> np.ndarray:
            if len(texts) == 1 and texts[0] in vectors:  # the question (its embedding is cached); sentences come from the index
                return vectors[texts[0]][None, :]
            return encoder.encode(texts)

        rows = []
        for q in questions:
            t0 = time.perf_counter()
            answer = extractive_answer(q.text, q.passages[mode], embed, min_score=ctx["min_score"], max_sentences=ctx["max_sentences"], cache=cache,
                                       scorer=ctx["scorer_spec"])
            best = answer.selection["quoted"][0]["score"] if answer.selection and answer.selection.get("quoted") else None
            rows.append(_Answered(answer.text if answer.grounded else "", answer.citations, (time.perf_counter() - t0) * 1000, raw=answer.text,
                                  sentence_score=best))
        out[mode] = rows
    return out


def _generate(generator: str, lm: Any, tokenizer: Any, questions: list[Question], modes: list[str], adapters: set[str],
              serving: _Serving, config: AnswerConfig, say: Say) -> dict[str, list[_Answered]]:
    """One LM generator's answers in every mode, batched; a prompt shared by two modes is generated once."""
    from experts.ml.batch_generation import BatchItem, BatchStats, generate_batch
    from experts.ml.lora_examples import Example

    items: list[Any] = []
    index: dict[tuple[Any, ...], int] = {}
    plan: dict[str, list[int | None]] = {}
    for mode in modes:
        plan[mode] = []
        for q in questions:
            passages = q.passages[mode]
            if serving.weak(passages):  # serving answers "not found" without calling the model
                plan[mode].append(None)
                continue
            adapter = q.adapter[mode] if generator == "lora" and q.adapter[mode] in adapters else None
            key = (q.row, tuple(p.chunk_id for p in passages), adapter)
            if key not in index:
                index[key] = len(items)
                items.append(BatchItem(Example(q.text, "", serving.shown(q.text, passages), whole=passages[: serving.generator.max_passages]), adapter=adapter))
            plan[mode].append(index[key])
    shared = sum(1 for rows in plan.values() for j in rows if j is not None) - len(items)
    say(f"  generating {len(items)} answers with {generator} ({shared} prompts shared between modes)")
    stats = BatchStats()
    room = int(getattr(lm.config, "max_position_embeddings", 2048)) - serving.max_new_tokens  # as serving fits the prompt
    generated = generate_batch(lm, tokenizer, items, max_new_tokens=serving.max_new_tokens, prompt_tokens=room,
                               batch_size=config.batch_size, stop_strings=serving.stops, stats=stats,
                               select=serving.generator.decoding == "select",
                               scorer=serving.generator.sentence_scorer())
    say(f"    {stats.new_tokens} tokens in {stats.wall_s:.0f} s ({stats.tokens_per_s:.1f} tokens/s)")
    out: dict[str, list[_Answered]] = {}
    for mode in modes:
        rows = []
        for q, j in zip(questions, plan[mode], strict=True):
            if j is None:
                rows.append(_Answered("", [], 0.0))
                continue
            parsed = serving.parse(generated[j].text, q.text, q.passages[mode])
            text = "" if not parsed.grounded or is_abstention(parsed.text) else parsed.text
            rows.append(_Answered(text, parsed.citations if text else [], generated[j].ms, generated[j].new_tokens, generated[j].text))
        out[mode] = rows
    return out


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

    answers: dict[tuple[str, str], list[_Answered]] = {}
    if "extractive" in config.generators:
        known = {mode: {queries[q.row]["text"]: (fast_x if mode == "fast" else qx)[q.row] for q in questions} for mode in modes}
        for mode, rows in _extractive(questions, modes, known, ctx).items():
            answers[(mode, "extractive")] = rows
    adapters_report: dict[str, Any] = {}
    lm_generators = [g for g in ("base", "lora") if g in config.generators]
    dtype = None
    serving = _Serving(config.max_new_tokens)
    if lm_generators:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(config.dtype) or serving.generator.torch_dtype()
        tokenizer, base = load_base(settings.BASE_MODEL, dtype=dtype)
        base.eval()
        folders: dict[str, Path] = {}
        if "lora" in lm_generators:
            folders, adapters_report = _train_adapters(config, ctx, tokenizer, serving, say)
        lm = attach_adapters(base, {k: str(v) for k, v in folders.items()}, settings.BASE_MODEL)
        for generator in lm_generators:
            for mode, rows in _generate(generator, lm, tokenizer, questions, modes, set(folders), serving, config, say).items():
                answers[(mode, generator)] = rows
    corpus.close()

    results: dict[str, dict[str, Any]] = {mode: {} for mode in modes}
    for (mode, generator), rows in answers.items():
        results[mode][generator] = _score(questions, mode, rows, corpus.units)
    report: dict[str, Any] = {
        "results": results,
        "n_questions": len(questions),
        "train_s": adapters_report.get("train_s", 0.0),
        "n_train": adapters_report.get("n_train", 0),
        "train_s_this_run": adapters_report.get("train_s_this_run", 0.0),
        "wall_s": round(time.perf_counter() - started, 1),
        "targets": _targets(results),
        "paired": paired_differences({key: _f1s(questions, rows) for key, rows in answers.items()}),
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
    _say_table(results, say)
    if config.answers_path:
        write_jsonl(Path(config.answers_path), answer_rows(questions, answers, queries, corpus))
        say(f"  every answer written to {config.answers_path}")
    return report


def answer_rows(questions: list[Question], answers: dict[tuple[str, str], list[_Answered]], queries: list[dict[str, Any]],
                corpus: Corpus) -> list[dict[str, Any]]:
    """One row per question: its id, text, gold answer and domain, and under ``answers`` each "mode/generator"'s
    answer as scored (``text``: "" when it abstained), what the model gave before parsing (``raw``), its ``f1``
    and its cited ``documents``: the material for comparing two runs question by question."""
    rows = []
    for k, q in enumerate(questions):
        given = {}
        for (mode, generator), answered in sorted(answers.items()):
            a = answered[k]
            given[f"{mode}/{generator}"] = {"text": a.text, "raw": a.raw or a.text, "f1": round(token_f1(a.text, q.gold), 4),
                                            "documents": [corpus.units[p.document_id]["doc_id"] for p in a.citations if p.document_id is not None],
                                            "best_passage_score": round(max((p.score for p in q.passages[mode]), default=0.0), 4),
                                            "gold_in_passages": gold_shown(q, mode),
                                            **({"sentence_score": a.sentence_score} if a.sentence_score is not None else {})}
        rows.append({"query_id": queries[q.row].get("query_id"), "question": q.text, "gold": q.gold, "domain": corpus.domains[q.domain],
                     "adapter": q.adapter.get("auto"), "answers": given})
    return rows


def gold_shown(q: Question, mode: str) -> bool:
    """Whether a passage ``mode`` retrieved for ``q`` holds its gold answer (``support`` at least ``MIN_SUPPORT``)."""
    return any(support(q.gold, p.text) >= MIN_SUPPORT for p in q.passages[mode])


def _f1s(questions: list[Question], rows: list[_Answered]) -> list[float]:
    """Each answer's token F1 against its question's gold answer."""
    return [token_f1(a.text, q.gold) for q, a in zip(questions, rows, strict=True)]


def _score(questions: list[Question], mode: str, rows: list[_Answered], units: list[dict[str, Any]]) -> dict[str, Any]:
    f1 = _f1s(questions, rows)
    rl = [rouge_l(a.text, q.gold) for q, a in zip(questions, rows, strict=True)]
    abstained = [not a.text for a in rows]
    absent = [not gold_shown(q, mode) for q in questions]
    precisions = [
        sum(1 for p in a.citations if p.document_id is not None and units[p.document_id]["doc_id"] in q.relevant) / len(a.citations)
        for q, a in zip(questions, rows, strict=True) if a.citations and q.relevant
    ]
    ms = [a.ms for a in rows]

    def share(flags: list[bool], where: list[bool]) -> float | None:
        picked = [f for f, w in zip(flags, where, strict=True) if w]
        return round(float(np.mean(picked)), 4) if picked else None

    return {
        "f1": round(float(np.mean(f1)), 4),
        "rouge_l": round(float(np.mean(rl)), 4),
        "citation_precision": round(float(np.mean(precisions)), 4) if precisions else None,
        "abstained": round(float(np.mean(abstained)), 4),
        "p50_ms": round(statistics.median(ms), 1) if ms else None,
        "tokens_per_s": round(sum(a.new_tokens for a in rows) * 1000 / sum(ms), 2) if any(a.new_tokens for a in rows) else None,
        "n": len(rows),
        "cited": round(float(np.mean([bool(a.citations) for a in rows])), 4),
        "absent": round(float(np.mean(absent)), 4),
        "abstained_when_absent": share(abstained, absent),
        "abstained_when_present": share(abstained, [not a for a in absent]),
        "f1_when_present": round(float(np.mean([f for f, a in zip(f1, absent, strict=True) if not a])), 4) if not all(absent) else None,
    }


# The targets' comparisons, as (better, worse) answers to the same questions.
PAIRS = ((("auto", "lora"), ("auto", "extractive")), (("auto", "lora"), ("flat", "lora")), (("auto", "lora"), ("auto", "base")),
         (("auto", "lora"), ("oracle", "lora")), (("auto", "extractive"), ("flat", "extractive")))


def paired_differences(f1: dict[tuple[str, str], list[float]]) -> dict[str, dict[str, float]]:
    """Each of ``PAIRS`` present: the mean per-question F1 difference, its standard error and n.

    Both answers are to the same questions, so the paired difference's standard error (the spread of
    the per-question differences over the square root of their number) says whether a gap between two
    figures of ``results`` is more than the luck of which questions were drawn.
    """
    out: dict[str, dict[str, float]] = {}
    for a, b in PAIRS:
        if not f1.get(a) or not f1.get(b):
            continue
        if len(f1[a]) != len(f1[b]):
            raise ValueError(f"{a} and {b} answered {len(f1[a])} and {len(f1[b])} questions: they cannot be paired")
        mean, se = paired_difference(f1[a], f1[b])
        out[f"{'/'.join(a)} - {'/'.join(b)}"] = {"mean": round(mean, 4), "se": _r(se), "n": len(f1[a])}
    return out


def _targets(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, computed (never asserted here): ratios and whether each holds."""
    def f1(mode: str, generator: str) -> float | None:
        return results.get(mode, {}).get(generator, {}).get("f1")

    out: dict[str, Any] = {}
    auto_lora, auto_base, auto_ext = f1("auto", "lora"), f1("auto", "base"), f1("auto", "extractive")
    flat_lora, oracle_lora = f1("flat", "lora"), f1("oracle", "lora")
    if auto_lora is not None and auto_base:
        out["auto_lora_over_auto_base"] = round(auto_lora / auto_base, 3)
        out["auto_lora_at_least_1.25x_base"] = auto_lora >= 1.25 * auto_base
    if auto_lora is not None and auto_ext is not None:
        out["auto_lora_at_least_extractive"] = auto_lora >= auto_ext
    if auto_lora is not None and flat_lora is not None:
        out["auto_lora_above_flat_lora"] = auto_lora > flat_lora
    if auto_lora is not None and oracle_lora:
        out["auto_lora_over_oracle_lora"] = round(auto_lora / oracle_lora, 3)
        out["auto_lora_at_least_80pct_oracle"] = auto_lora >= 0.8 * oracle_lora
    return out


def _say_table(results: dict[str, dict[str, Any]], say: Say) -> None:
    say(f"  {'mode':8s} {'generator':10s} {'F1':>6s} {'ROUGE-L':>8s} {'cite P':>7s} {'abst.':>6s} {'p50 ms':>8s} {'tok/s':>6s}")
    for mode, by_generator in results.items():
        for generator, r in by_generator.items():
            cite = "-" if r["citation_precision"] is None else f"{r['citation_precision']:.3f}"
            tps = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.1f}"
            say(f"  {mode:8s} {generator:10s} {r['f1']:6.3f} {r['rouge_l']:8.3f} {cite:>7s} {r['abstained']:6.3f} {r['p50_ms']:8.1f} {tps:>6s}")

