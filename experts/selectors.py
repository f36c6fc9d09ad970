"""Reads of experts.

Serving reads the same few rows on every request (which experts are active, their rows, the version
that serves each one). ``active_expert_slugs``, ``fallback_slugs``, ``experts_by_slug`` and
``serving_version`` keep what they read for ``SERVING_CACHE_TTL_S`` seconds per process (0: read
every time); saving or deleting an Expert or ExpertVersion through the ORM clears that at once, and
``clear_serving_caches()`` does it by hand (changes made with ``queryset.update()`` show within the TTL).
When an entry expires, one caller reads it again while the others keep using the old value: without
that, every request thread of a busy server missed at the same instant and ran the same queries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save

from .choices import ExpertStatus
from .models import Expert, ExpertVersion

_memo: dict[Any, tuple[float, Any]] = {}
_memo_lock = threading.Lock()
_generation = 0  # bumped by every clear, so a read that started before a clear is not stored after it
_refreshing: set[Any] = set()  # expired keys one caller is reading again


def serving_cached(key: Any, load: Callable[[], Any]) -> Any:
    """``load()``, reused for SERVING_CACHE_TTL_S seconds in this process (cleared with the serving caches by
    ``clear_serving_caches``: the apps above connect that to the saves of whatever their ``load`` reads)."""
    ttl = float(settings.SERVING_CACHE_TTL_S)
    if ttl <= 0:
        return load()
    now = time.monotonic()
    hit = _memo.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    refreshing = False
    if hit is not None:  # expired (a clear removes entries): whoever comes first reads it again
        with _memo_lock:
            if key in _refreshing:
                return hit[1]
            _refreshing.add(key)
            refreshing = True
    try:
        generation = _generation
        value = load()
        with _memo_lock:
            if generation == _generation:
                _memo[key] = (now + ttl, value)
    finally:
        if refreshing:
            with _memo_lock:
                _refreshing.discard(key)
    return value


def clear_serving_caches(*_args: Any, **_kwargs: Any) -> None:
    """Forget what serving read of experts and their versions (in this process)."""
    global _generation
    with _memo_lock:
        _generation += 1
        _memo.clear()


for _model in (Expert, ExpertVersion):
    post_save.connect(clear_serving_caches, sender=_model, dispatch_uid=f"serving-cache-save-{_model.__name__}")
    post_delete.connect(clear_serving_caches, sender=_model, dispatch_uid=f"serving-cache-delete-{_model.__name__}")


def active_experts() -> QuerySet[Expert]:
    """Experts the router may choose."""
    return Expert.objects.filter(status=ExpertStatus.ACTIVE)


def active_expert_slugs() -> frozenset[str]:
    """Slugs of the active experts (cached, see the module docstring)."""
    return serving_cached("active", lambda: frozenset(active_experts().values_list("slug", flat=True)))


def fallback_slugs() -> tuple[str, ...]:
    """Slugs of the active fallback experts, sorted (cached)."""
    return serving_cached("fallback", lambda: tuple(active_experts().filter(is_fallback=True).order_by("slug").values_list("slug", flat=True)))


def experts_by_slug(slugs: Iterable[str]) -> dict[str, Expert]:
    """The Expert rows of ``slugs`` that exist, by slug (cached; treat them as read-only)."""
    key = ("rows", tuple(sorted(set(slugs))))
    return dict(serving_cached(key, lambda: {e.slug: e for e in Expert.objects.filter(slug__in=key[1])}))


def expert_by_slug(slug: str) -> Expert | None:
    return Expert.objects.filter(slug=slug).first()


def serving_adapters() -> list:
    """The active version's adapter of every active expert that has one, as ``AdapterRef``s (for vLLM's --lora-modules)."""
    from .generation.base import AdapterRef

    versions = ExpertVersion.objects.filter(status="active", expert__status=ExpertStatus.ACTIVE).exclude(adapter_path="").select_related("expert")
    return [AdapterRef(expert=v.expert.slug, name=v.adapter_name, path=v.adapter_path, base_model=v.base_model, version=v.version) for v in versions]


def serving_version(slug: str):
    """The active ExpertVersion of ``slug``, or None (the expert answers with the base model / extractively); cached."""
    return serving_cached(("version", slug), lambda: ExpertVersion.objects.filter(expert__slug=slug, status="active").first())


def expert_names(slugs: list[str]) -> dict[str, str]:
    """Expert display names by slug (slugs without an expert row are absent)."""
    return dict(Expert.objects.filter(slug__in=slugs).values_list("slug", "name"))
