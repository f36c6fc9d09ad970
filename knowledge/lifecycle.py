"""An expert's collection lives and dies with its row.

A deleted expert's collection is dropped, and a new expert's is emptied of anything a deleted expert of the
same slug left there (a collection is named by the slug: ``selectors.collection_name``). Without this, an
expert made again under a deleted one's name, by its team or by another, would serve the deleted one's
passages. Both run once the transaction commits; a store that is down then is logged (``operations``' backup
and restore, and ``loaddata``, bring rows and collections back together and are left alone).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save

from experts.models import Expert

from .selectors import collection_name
from .stores import StoreUnavailable, get_store

logger = logging.getLogger(__name__)


def _drop(name: str, why: str) -> None:
    try:
        store = get_store()
        if store.count(name):
            store.drop(name)
            logger.info("knowledge.collection.dropped", extra={"collection": name, "why": why})
    except StoreUnavailable:
        logger.warning("knowledge.collection.drop_failed", extra={"collection": name, "why": why})


def expert_deleted(sender: Any, instance: Expert, **kwargs: Any) -> None:
    name = collection_name(instance)
    transaction.on_commit(lambda: _drop(name, "expert deleted"))


def expert_created(sender: Any, instance: Expert, created: bool = False, raw: bool = False, **kwargs: Any) -> None:
    if created and not raw:  # raw: a fixture or loaddata brings rows and their collections back together
        name = collection_name(instance)
        transaction.on_commit(lambda: _drop(name, "left by a deleted expert of the same slug"))


post_delete.connect(expert_deleted, sender=Expert, dispatch_uid="knowledge-drop-deleted-experts-collection")
post_save.connect(expert_created, sender=Expert, dispatch_uid="knowledge-empty-new-experts-collection")
