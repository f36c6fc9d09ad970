"""``manage.py bench generation``: the in-process language model's first streamed token, speed and adapter switches.

It streams answers through ``TransformersGenerator.from_settings()`` to the demo's test questions over
passages ranked by the configured encoder (questions below ``EXTRACTIVE_MIN_SCORE`` are skipped: the
product answers those without the model). Per concurrency level it reports ``first_token_p50_ms`` /
``p90``, ``tokens_per_s`` (None with ``select`` decoding), ``throughput_tokens_per_s``, answer lengths
and ``timed_out``; the queue is widened to the concurrency (``queue_max_used``). ``adapters`` times a
forward pass with the same adapter against alternating random ones; ``vllm`` only with ``VLLM_URL``.
The load average before and after is in the report: other work skews every figure.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from evaluation.datasets import read_jsonl
from experts.generation.base import AdapterRef, GenerationRequest, GenerationTimeout
from experts.generation.queue import GenerationQueue
from experts.generation.transformers import TransformersGenerator
from experts.ml.extractive import Answer, Passage
from experts.ml.lora import LoraParams
from knowledge.ml.chunking import chunk_text

DEMO = Path(settings.BASE_DIR) / "demo"


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def demo_requests(n: int, top_k: int, min_score: float) -> list[GenerationRequest]:
    """``n`` held-out demo questions with their best ``top_k`` demo passages (questions with weak passages skipped)."""
    from encoders import get_encoder

    chunks: list[Passage] = []
    for path in sorted((DEMO / "documents").glob("*.jsonl")):
        for doc in read_jsonl(path):
            chunks += [Passage(text=c.text, title=doc["title"], expert=path.stem, source=doc["title"], chunk_id=f"{doc['id']}:{c.position}")
                       for c in chunk_text(doc["text"], size=1000, overlap=150)]
    encoder = get_encoder()
    vectors = encoder.encode([f"{c.title}\n{c.text}" for c in chunks])
    questions = [q["text"] for q in read_jsonl(DEMO / "queries.jsonl") if q.get("split") == "test"]
    picked: list[GenerationRequest] = []
    step = max(1, len(questions) // (4 * n))
    for question in questions[::step]:
        scores = vectors @ encoder.encode([question])[0]
        best = np.argsort(-scores)[:top_k]
        if scores[best[0]] < min_score:
            continue
        passages = [Passage(**{**chunks[i].__dict__, "score": float(scores[i])}) for i in best]
        picked.append(GenerationRequest(question=question, expert=passages[0].expert, passages=passages))
        if len(picked) == n:
            break
    return picked


def _stream_one(gen: TransformersGenerator, request: GenerationRequest) -> dict[str, Any]:
    t0 = time.perf_counter()
    first = None
    answer: Answer | None = None
    for item in gen.stream(request):
        if isinstance(item, Answer):
            answer = item
        elif first is None and item.strip():
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    assert answer is not None
    tokens = len(gen._tokenizer(answer.text, add_special_tokens=False)["input_ids"])
    first = total if first is None else first
    return {"first_s": first, "total_s": total, "tokens": tokens, "decode_tokens_per_s": (tokens - 1) / (total - first) if total > first and tokens > 1 else None,
            "grounded": answer.grounded, "citations": len(answer.citations), "finish_reason": answer.finish_reason, "text": answer.text}


def _level(gen: TransformersGenerator, requests: list[GenerationRequest], concurrency: int, say: Callable[[str], None]) -> dict[str, Any]:
    def attempt(request: GenerationRequest) -> dict[str, Any] | str:
        """The request's figures, or why it has none: "timed out" or the error."""
        try:
            return _stream_one(gen, request)
        except GenerationTimeout:  # waited out its budget in the queue: served extractively in the product
            return "timed out"
        except Exception as exc:  # reported, not raised: one failure should not hide the other figures
            return f"{type(exc).__name__}: {exc}"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = list(pool.map(attempt, requests))
    wall = time.perf_counter() - t0
    results = [o for o in outcomes if isinstance(o, dict)]
    timed_out = outcomes.count("timed out")
    errors = [o for o in outcomes if isinstance(o, str) and o != "timed out"]
    firsts = [r["first_s"] * 1000 for r in results]
    # a chosen answer (``select`` decoding) arrives whole: there is no decoding speed to report
    rates = [r["decode_tokens_per_s"] for r in results if r["decode_tokens_per_s"]] if gen.decoding != "select" else []
    tokens = [r["tokens"] for r in results]
    report = {
        "concurrency": concurrency, "requests": len(requests), "answered": len(results), "timed_out": timed_out, "errors": errors,
        "first_token_p50_ms": round(_percentile(firsts, 50), 1), "first_token_p90_ms": round(_percentile(firsts, 90), 1),
        "tokens_per_s": round(statistics.median(rates), 2) if rates else None,
        "throughput_tokens_per_s": round(sum(tokens) / wall, 2) if wall else None,
        "answer_tokens_mean": round(statistics.fmean(tokens), 1) if tokens else None, "answer_tokens_max": max(tokens, default=0),
        "total_p50_s": round(_percentile([r["total_s"] for r in results], 50), 2), "wall_s": round(wall, 1),
        "grounded": sum(r["grounded"] for r in results), "finish_reasons": dict(Counter(r["finish_reason"] for r in results)),
    }
    say(f"  concurrency {concurrency}: {len(results)} of {len(requests)} answered by the model ({timed_out} out of time), "
        f"first token p50 {report['first_token_p50_ms']} ms (p90 {report['first_token_p90_ms']}), "
        f"{report['tokens_per_s']} tokens/s per answer, {report['throughput_tokens_per_s']} tokens/s in all, "
        f"{report['answer_tokens_mean']} tokens per answer")
    return report


def _random_adapter(base_model: str, folder: Path, seed: int, params: LoraParams) -> None:
    """A LoRA adapter on ``base_model`` with random non-zero weights (peft's ``init_lora_weights=False``), saved to ``folder``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_model, local_files_only=True)
    config = LoraConfig(r=params.rank, lora_alpha=params.alpha, target_modules=list(params.target_modules),
                        init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(str(folder))


def _adapter_switch(gen: TransformersGenerator, request: GenerationRequest, rounds: int, say: Callable[[str], None],
                    params: LoraParams | None = None) -> dict[str, Any]:
    """Two random adapters of the product's shape (``params``, default ``LoraParams()``) switched on ``gen``'s model."""
    params = params or LoraParams()
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as root:
        refs = []
        for i in range(2):
            folder = Path(root) / f"bench-v{i + 1}"
            _random_adapter(gen.base_model, folder, seed=i, params=params)
            refs.append(AdapterRef(expert="bench", name=f"bench-v{i + 1}", path=str(folder), base_model=gen.base_model, version=i + 1))
        t0 = time.perf_counter()
        gen.warm_up(refs)
        load_s = time.perf_counter() - t0

        def timed(adapter: AdapterRef) -> float:
            t = time.perf_counter()
            gen.next_token_logits(GenerationRequest(question=request.question, expert="bench", passages=request.passages, adapter=adapter))
            return (time.perf_counter() - t) * 1000

        timed(refs[0])
        same = [timed(refs[0]) for _ in range(rounds)]
        alternating = [timed(refs[i % 2]) for i in range(1, rounds + 1)]
        peft = gen._peft
        t = time.perf_counter()
        for i in range(200):
            peft.set_adapter(refs[i % 2].name)
        set_adapter_us = (time.perf_counter() - t) / 200 * 1e6
    report = {
        "adapters": [r.name for r in refs], "rank": params.rank, "target_modules": list(params.target_modules),
        "load_two_s": round(load_s, 2), "forward_same_adapter_p50_ms": round(statistics.median(same), 1),
        "forward_switching_p50_ms": round(statistics.median(alternating), 1),
        "switch_cost_ms": round(statistics.median(alternating) - statistics.median(same), 1), "set_adapter_us": round(set_adapter_us, 1),
        "rounds": rounds,
    }
    say(f"  adapters: one forward pass {report['forward_same_adapter_p50_ms']} ms with the same adapter, "
        f"{report['forward_switching_p50_ms']} ms switching ({report['switch_cost_ms']} ms); set_adapter {report['set_adapter_us']} µs")
    return report


def _vllm(requests: list[GenerationRequest], say: Callable[[str], None]) -> dict[str, Any]:
    if not os.environ.get("VLLM_URL"):
        return {"measured": False, "reason": "not measured: VLLM_URL not set"}
    from experts.generation.vllm import VllmGenerator

    gen = VllmGenerator()
    firsts = []
    for request in requests:
        t0 = time.perf_counter()
        for item in gen.stream(request):
            if isinstance(item, str) and item.strip():
                firsts.append((time.perf_counter() - t0) * 1000)
                break
    report = {"measured": True, "url": os.environ["VLLM_URL"], "first_token_p50_ms": round(_percentile(firsts, 50), 1), "requests": len(firsts)}
    say(f"  vllm: first token p50 {report['first_token_p50_ms']} ms")
    return report


def bench_generation(requests: int = 10, concurrency: int = 8, adapter_rounds: int = 10, skip_adapters: bool = False,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """First streamed token, tokens/s and answer length at concurrency 1 and ``concurrency``; adapter switch cost; vLLM if configured."""
    load_before = os.getloadavg()
    gen = TransformersGenerator.from_settings()
    say(f"base model {gen.base_model}; up to {gen.max_tokens} new tokens, {gen.max_passages} passages of {gen.passage_chars} chars, "
        f"{gen.threads} torch thread(s)")
    asked = demo_requests(max(requests, concurrency), int(settings.RETRIEVAL_TOP_K), float(settings.EXTRACTIVE_MIN_SCORE))
    t0 = time.perf_counter()
    _stream_one(gen, asked[0])  # loads the model and the prompt prefix state: not measured
    load_s = time.perf_counter() - t0
    say(f"  model loaded and warm in {load_s:.1f} s; {len(asked)} demo questions")
    levels = []
    for level in sorted({1, concurrency}):
        gen.queue = GenerationQueue(max(int(settings.GENERATION_QUEUE_MAX), level))
        levels.append(_level(gen, asked[: max(requests, level)], level, say))
    report: dict[str, Any] = {
        "base_model": gen.base_model, "max_tokens": gen.max_tokens, "passages": gen.max_passages, "passage_chars": gen.passage_chars,
        "decoding": gen.decoding, "select_shortlist": gen.select_shortlist if gen.decoding == "select" else None, "torch_threads": gen.threads, "timeout_s": gen.timeout_s, "queue_max_setting": int(settings.GENERATION_QUEUE_MAX),
        "queue_max_used": max(int(settings.GENERATION_QUEUE_MAX), concurrency), "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before], "warm_up_s": round(load_s, 1), "levels": levels,
        "first_token_p50_ms": levels[0]["first_token_p50_ms"], "tokens_per_s": levels[0]["tokens_per_s"],
        "target_first_token_p50_ms": 1500, "meets_target": levels[0]["first_token_p50_ms"] <= 1500,
    }
    report["adapters"] = {"measured": False} if skip_adapters else _adapter_switch(gen, asked[0], adapter_rounds, say)
    report["vllm"] = _vllm(asked[:requests], say)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return report
