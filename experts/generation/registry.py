"""The backend registry: ``get_generator`` picks the backend named by the ``GENERATOR`` setting.

The interface lives in ``base``; the backends import it, and only this module imports them (lazily:
``transformers`` pulls in torch, ``vllm`` the OpenAI client). The factory is wrapped with the fault hooks
of ``faulty`` (a no-op unless ``SWITCHBOARD_FAULTS_FILE`` is set), and keeps ``cache_clear``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache

from .base import GenerationUnavailable, Generator
from .faulty import with_fault_hooks

logger = logging.getLogger(__name__)

BACKENDS = ("extractive", "transformers", "vllm")
# Adapters of the busiest experts the in-process backend loads at server start (at most ADAPTER_CACHE_SIZE stay):
# not a tuned figure, the first requests to the experts most asked for do not wait for their adapter.
WARM_UP_ADAPTERS = 4


@with_fault_hooks
@lru_cache(maxsize=1)
def get_generator(name: str | None = None) -> Generator:
    """The configured backend (``GENERATOR``); unknown names fail at start, not per request."""
    from django.conf import settings

    name = name or settings.GENERATOR
    if name == "extractive":
        from .extractive import ExtractiveGenerator

        return ExtractiveGenerator()
    if name == "transformers":
        from .transformers import TransformersGenerator

        return TransformersGenerator.from_settings()
    if name == "vllm":
        # Imports the OpenAI client only; vLLM itself runs as a separate server and is never imported here.
        from .vllm import VllmGenerator

        return VllmGenerator()
    raise ValueError(f"GENERATOR={name!r} is not available; known backends: {', '.join(BACKENDS)}")


@lru_cache(maxsize=1)
def get_fallback_generator() -> Generator:
    """The extractive backend, which answers when the configured model cannot (failed, too slow, breaker open).

    Kept apart from ``get_generator``'s cache (asking that one for "extractive" would evict the loaded
    model) and without fault hooks: an injected generator fault is meant to exercise this fallback.
    """
    from .extractive import ExtractiveGenerator

    return ExtractiveGenerator()


def warm_up_hottest(traffic: Callable[[], dict[str, int]] | None = None) -> list[str]:
    """At server start with ``GENERATOR=transformers``: load the busiest experts' adapters.

    Args:
        traffic: returns recent answers per expert slug (the routing app's ``traffic_by_expert``;
            passed in because experts may not import routing). Without it, serving order.
    """
    from django.conf import settings

    from experts.selectors import serving_adapters

    if settings.GENERATOR != "transformers":
        return []
    counts = traffic() if traffic is not None else {}
    adapters = sorted(serving_adapters(), key=lambda a: -counts.get(a.expert, 0))[:WARM_UP_ADAPTERS]
    generator = get_generator()
    warm_up = getattr(generator, "warm_up", None)  # only backends that load adapters in-process have it
    try:
        loaded = warm_up(adapters) if warm_up is not None else []
    except GenerationUnavailable as exc:  # e.g. a fresh install before `manage.py prepare_base_model`
        logger.warning("transformers backend not warmed up: %s; answers fall back to the extractive ones until it loads", exc)
        return []
    logger.info("transformers backend warmed up with %d adapters: %s", len(loaded), ", ".join(loaded) or "-")
    return loaded
