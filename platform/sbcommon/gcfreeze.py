"""Keep the garbage collector off the objects a serving process loads once.

A server process holds ~640k objects that live as long as it does, which the cyclic collector walked
at every full collection (docs/ARCHITECTURE.md, "The serving process"). ``gc.freeze()`` moves
everything alive at that point to a permanent generation the collector skips; objects made later are
collected as before. Garbage is collected first, so none of it is frozen.

Some of what a server keeps is loaded by its first requests (the router, each collection's index,
the serving caches), so ``freeze_after_requests`` freezes again once after a number of requests.
"""

from __future__ import annotations

import gc
import itertools
import logging

logger = logging.getLogger(__name__)


def freeze_startup_objects() -> int:
    """Collect, then freeze every object alive now; returns how many objects are frozen in all."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("gc.freeze: %d startup objects are skipped by the collector from now on", frozen)
    return frozen


def freeze_after_requests(count: int = 200) -> None:
    """Freeze once more when this process has finished ``count`` requests (Django's ``request_finished``)."""
    from django.core.signals import request_finished

    seen = itertools.count(1)

    def on_finished(**_kwargs) -> None:
        if next(seen) == count:
            request_finished.disconnect(on_finished, dispatch_uid=uid)
            freeze_startup_objects()

    uid = f"gcfreeze-after-requests-{id(on_finished)}"
    request_finished.connect(on_finished, weak=False, dispatch_uid=uid)
