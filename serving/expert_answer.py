"""One expert's answer from its passages, and who wrote it (``Source``).

Who writes the answer (``answer_source``): "model" (the configured language model, with the expert's
adapter when it has one), "extractive" (``GENERATOR=extractive``: cited sentences, no model),
"extractive_fallback" (the model failed, ran out of time or has its breaker open: the extractive
answer from the same passages, ``fallback_reason`` says why), "not_found" (no passage was strong
enough to show a model) or "none" (no expert covers the question: ``serving.chat``). A broken adapter
is replaced by the expert's previous active version's adapter, else the bare base model (``adapter``
and ``expert_version`` say which answered, ``fallback_reason`` why). A model's answer may come from
the answer cache (``serving.answer_cache``; ``cached_question`` names the question it was written for).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

from django.conf import settings

from experts.breaker import breaker_for
from experts.generation import (
    AdapterError,
    AdapterRef,
    GenerationError,
    GenerationRequest,
    get_fallback_generator,
    get_generator,
)
from experts.ml.extractive import NOT_FOUND, Answer, Passage
from experts.ml.junk import looks_like_menu
from experts.models import ExpertVersion
from experts.selectors import serving_version
from routing.experiments.assignment import ArmAssignment

from . import answer_cache

logger = logging.getLogger(__name__)


@dataclass
class Source:
    """Who wrote one expert's answer: ``answer_source`` (see the module), why a fallback, the adapter and version used."""

    answer_source: str = ""
    fallback_reason: str = ""
    adapter: str | None = None
    expert_version: int | None = None
    citation_format: str = "[{index}]"
    cached_question: str = ""  # the answer came from the answer cache, written for this question


@dataclass
class Opened:
    """One expert's first output, who wrote it, and what comes with it."""

    output: str | Answer  # a streamed answer's first text delta, or the whole answer
    source: Source
    breaker: Any  # the breaker the answer's success or failure counts on: the expert's, or its model's (``<slug>:generation``)
    stream: Iterator[str | Answer] | None = None  # the rest of a streamed answer
    cache_key: str | None = None  # set when the model's answer may be cached under it (``serving.answer_cache``)


def generation_settings(slug: str, arm: ArmAssignment | None) -> tuple[ExpertVersion | None, AdapterRef | None]:
    """The expert version that serves ``slug`` (the arm's, else the active one) and its adapter, if any."""
    version = None
    if arm is not None and slug in arm.expert_versions:
        version = ExpertVersion.objects.filter(expert__slug=slug, version=arm.expert_versions[slug]).select_related("expert").first()
    if version is None:
        version = serving_version(slug)
    adapter = None
    if version is not None and version.adapter_path:
        adapter = AdapterRef(expert=slug, name=version.adapter_name, path=version.adapter_path, base_model=version.base_model, version=version.version)
    return version, adapter


def open_answer(request: GenerationRequest, version: ExpertVersion | None, breaker: Any, *, stream: bool, allowed: set[str] | None,
                cacheable: bool, request_id: str) -> Opened:
    """The first output of ``request.expert``'s answer from ``request.passages``, and who wrote it.

    The extractive backend answers itself (its ``GenerationError`` goes up: the caller fails the
    expert over). A model answers unless the passages are weak (``NOT_FOUND`` then, the model is not
    asked), its breaker (``<slug>:generation``) is open, or it fails: then the extractive answer from
    the same passages. ``GenerationBusy`` goes up to the caller (HTTP 503).

    Args:
        request: the generation request, passages and the serving version's prompt and adapter included.
        version: the expert version ``request`` was built from (None: the expert has none).
        breaker: the expert's breaker, which an extractive answer's success or failure counts on.
        stream: open a stream (the first text delta) rather than make the whole answer.
        allowed: the experts the caller may ask (part of the answer cache's key).
        cacheable: whether the model's answer may come from or go to the answer cache (a first
            question, searched without earlier turns).
        request_id: for the logs.
    """
    generator = get_generator()
    number = version.version if version is not None else None
    fmt = request.citation_format
    if getattr(generator, "name", "") == "extractive":  # nothing to fall back to
        return _opened(generator, request, stream, Source("extractive", expert_version=number, citation_format=fmt), breaker)
    # A menu passage is never quoted (the extractive answer drops it itself), so the model is not shown one either.
    request = replace(request, passages=[p for p in request.passages if not looks_like_menu(p.text)])
    if not request.passages or max(p.score for p in request.passages) < float(settings.EXTRACTIVE_MIN_SCORE):
        return Opened(Answer(text=NOT_FOUND, citations=[], grounded=False), Source("not_found", expert_version=number, citation_format=fmt), breaker)
    model_breaker = breaker_for(f"{request.expert}:generation")
    if not model_breaker.allow():
        return _extractive(request, stream, "circuit_open", number, breaker)
    cache_key = None
    if cacheable and not request.temperature and answer_cache.get_cache().enabled:
        cache_key = answer_cache.cache_key(request, number, allowed)
        hit = _cached_answer(cache_key, request, number, model_breaker)
        if hit is not None:
            return hit
    try:
        opened = _model_answer(generator, request, version, stream, model_breaker, request_id)
    except GenerationError as exc:
        model_breaker.record_failure(exc.kind)
        logger.warning("chat.generation_fallback", extra={"expert": request.expert, "reason": exc.kind, "error": str(exc)[:200],
                                                          "request_id": request_id})
        return _extractive(request, stream, exc.kind, number, breaker)
    opened.cache_key = cache_key
    return opened


def _model_answer(generator: Any, request: GenerationRequest, version: ExpertVersion | None, stream: bool, breaker: Any,
                  request_id: str) -> Opened:
    """The model's first output with the request's adapter, else the previous active version's, else none."""
    number = version.version if version is not None else None
    options: list[tuple[GenerationRequest, int | None]] = [(request, number)]
    if request.adapter is not None:
        previous = _previous_adapter(request.expert, version)
        if previous is not None:
            older, adapter = previous
            options.append((replace(request, adapter=adapter, system_prompt=older.system_prompt, citation_format=older.citation_format),
                            older.version))
        options.append((replace(request, adapter=None), number))
    reason = ""
    for option, option_version in options:
        adapter = option.adapter.name if option.adapter is not None else None
        source = Source("model", fallback_reason=reason, adapter=adapter, expert_version=option_version, citation_format=option.citation_format)
        try:
            return _opened(generator, option, stream, source, breaker)
        except AdapterError as exc:
            reason = exc.kind
            logger.warning("chat.adapter_unusable", extra={"expert": request.expert, "adapter": adapter or "", "reason": exc.kind,
                                                           "error": str(exc), "request_id": request_id})
    raise GenerationError(f"no adapter of expert {request.expert!r} could be used ({reason})")


def _previous_adapter(slug: str, version: ExpertVersion | None) -> tuple[ExpertVersion, AdapterRef] | None:
    """The adapter of the version that was active before ``version`` (the most recently activated other one), if any."""
    earlier = ExpertVersion.objects.filter(expert__slug=slug, activated_at__isnull=False).exclude(adapter_path="")
    if version is not None:
        earlier = earlier.exclude(pk=version.pk).exclude(adapter_path=version.adapter_path)
    previous = earlier.select_related("expert").order_by("-activated_at").first()
    if previous is None:
        return None
    return previous, AdapterRef(expert=slug, name=previous.adapter_name, path=previous.adapter_path, base_model=previous.base_model,
                                version=previous.version)


def _cached_answer(key: str, request: GenerationRequest, number: int | None, breaker: Any) -> Opened | None:
    """The model's answer cached under ``key`` (this very question, version and passages), else None."""
    cached = answer_cache.get_cache().lookup(key)
    if cached is None:
        return None
    names = {f.name for f in fields(Passage)} - {"sentence_vectors"}
    citations = [Passage(**{k: v for k, v in c.items() if k in names}) for c in cached.citations]
    source = Source("model", adapter=request.adapter.name if request.adapter else None, expert_version=number,
                    citation_format=request.citation_format, cached_question=cached.question)
    return Opened(Answer(text=cached.text, citations=citations, grounded=True), source, breaker)


def _extractive(request: GenerationRequest, stream: bool, reason: str, version: int | None, breaker: Any) -> Opened:
    """The extractive answer from the request's passages, standing in for the model (``reason``: why)."""
    source = Source("extractive_fallback", fallback_reason=reason, expert_version=version, citation_format=request.citation_format)
    return _opened(get_fallback_generator(), replace(request, adapter=None), stream, source, breaker)


def _opened(generator: Any, request: GenerationRequest, stream: bool, source: Source, breaker: Any) -> Opened:
    """The generator's whole answer, or its stream and the stream's first item."""
    if not stream:
        return Opened(generator.generate(request), source, breaker)
    rest = iter(generator.stream(request))
    try:
        first = next(rest)
    except StopIteration:
        raise GenerationError("the generator produced nothing") from None
    return Opened(first, source, breaker, rest)
