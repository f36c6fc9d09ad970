"""What every vector store does alike, beyond the Protocol's signatures (``base.VectorStore``).

The search methods it takes, its fault-injection hook, and when a search over several collections
survives a broken one. ``tests/knowledge/test_vector_store_contract.py`` holds every store to them.
"""

from __future__ import annotations

import logging

from sbcommon import faults

from ..ml.index import METHODS
from .base import StoreUnavailable

logger = logging.getLogger(__name__)

# Candidates fetched per search method for every chunk asked for, before fusing.
PREFETCH_FACTOR = 4


def check_method(method: str) -> None:
    """Refuse a search method no store knows (``ValueError``)."""
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")


def inject_faults(names: list[str]) -> None:
    """Fault-injection hook (``sbcommon.faults``): the store slow or down, for everyone or for some experts' collections."""
    for name in names:
        faults.inject("vector_store", StoreUnavailable, expert=name.removeprefix("expert_"))


def check_failures(names: list[str], weights: list[float], failures: dict[str, StoreUnavailable]) -> None:
    """A fused search survives a broken *secondary* collection (skipped, logged) but not a broken primary one.

    The primary collection (highest weight: the expert the router chose first) failing raises
    ``StoreUnavailable``, so the caller fails over to the next expert; so does every collection
    failing. A collection searched only because the search widened to other experts does not
    take the whole answer down with it.
    """
    if not failures:
        return
    weighted = [(w, n) for n, w in zip(names, weights, strict=True) if w > 0]
    primary = max(weighted, key=lambda item: item[0])[1] if weighted else None
    if primary in failures or len(failures) >= len(weighted):
        raise failures.get(primary) or next(iter(failures.values()))
    logger.warning("knowledge.store.collections_skipped", extra={"collections": sorted(failures)})
