"""Prometheus metrics of the serving path, exposed at ``/metrics``.

Fed by ``serving.events.record``, the chat API's base class (every response by status) and the
micro-batching encoder; the caches' hits and misses are read at scrape time. Each process has its own
registry: with several uvicorn workers set ``PROMETHEUS_MULTIPROC_DIR`` so a scrape sums them.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from encoders import add_batch_listener, cache_counts
from experts.generation.extractive import chunk_cache_counts

STAGES = ("embed", "route", "retrieve", "generate", "total")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Counter("switchboard_requests", "Routed requests by mode and HTTP status.", ["mode", "status"])
RESPONSES = Counter("switchboard_api_responses", "Responses of the chat-facing endpoints by endpoint and status (401/429 included).",
                    ["endpoint", "status"])
LATENCY = Histogram("switchboard_stage_latency_seconds", "Time per request spent in each stage.", ["stage"], buckets=_LATENCY_BUCKETS)
EXPERT_REQUESTS = Counter("switchboard_expert_requests", "Requests answered per expert.", ["expert"])
ERRORS = Counter("switchboard_errors", "Failed or refused requests by kind.", ["kind"])
FALLBACKS = Counter("switchboard_fallbacks", "Requests answered by the fallback expert after the router abstained.")
ABSTENTIONS = Counter("switchboard_abstentions", "Requests for which the router found no close expert.")
FAILOVERS = Counter("switchboard_failovers", "Requests answered by another expert after the first choice failed.")
ENCODER_BATCH = Histogram("switchboard_encoder_batch_size", "Texts per micro-batched encoder forward pass.",
                          buckets=(1, 2, 4, 8, 16, 32, 64, 128))
EVENTS_DROPPED = Counter("switchboard_events_dropped", "Routing events dropped because the write buffer was full.")
EVENTS_WRITE_FAILURES = Counter("switchboard_event_write_failures", "Failed batch writes of routing events (retried).")
EVENTS_BUFFERED = Gauge("switchboard_events_buffered", "Routing events waiting to be written.", multiprocess_mode="livesum")


add_batch_listener(ENCODER_BATCH.observe)


class CacheCollector:
    """``switchboard_cache_lookups_total{cache, result}``: the serving caches' own hit and miss counts (this process).

    ``encoder``: question and sentence vectors; ``chunk_sentences``: the extractive generator's split
    and encoded chunks. A chunk miss costs a forward pass over the chunk's sentences, so the miss
    rate says whether a server has warmed up.
    """

    def collect(self):
        family = CounterMetricFamily("switchboard_cache_lookups", "Lookups of the serving caches by cache and result (this process).",
                                     labels=["cache", "result"])
        for name, (hits, misses) in (("encoder", cache_counts()), ("chunk_sentences", chunk_cache_counts())):
            family.add_metric([name, "hit"], hits)
            family.add_metric([name, "miss"], misses)
        yield family


REGISTRY.register(CacheCollector())


def observe_event(fields: dict[str, Any]) -> None:
    """Count one routed request from its routing-event fields."""
    REQUESTS.labels(mode=str(fields.get("mode", "")), status=str(fields.get("status_code", 200))).inc()
    for stage in STAGES:
        value = fields.get(f"{stage}_ms")
        if value:
            LATENCY.labels(stage=stage).observe(float(value) / 1000.0)
    if fields.get("expert"):
        EXPERT_REQUESTS.labels(expert=str(fields["expert"])).inc()
    if fields.get("error_kind"):
        ERRORS.labels(kind=str(fields["error_kind"])).inc()
    if fields.get("fallback_used"):
        FALLBACKS.inc()
    if fields.get("abstained"):
        ABSTENTIONS.inc()
    if fields.get("failover_from"):
        FAILOVERS.inc()


def observe_response(endpoint: str, status: int) -> None:
    """Count one response of a chat-facing endpoint."""
    RESPONSES.labels(endpoint=endpoint, status=str(status)).inc()


def _registry():
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def _from_this_machine(request: HttpRequest) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus' text format, which names every expert, so never open to everyone.

    404 when METRICS_ENABLED is off. With METRICS_TOKEN set, a scraper sends ``Authorization: Bearer
    <token>`` (401 otherwise); without one, only this machine may read it (a loopback address; 403
    for any other). Behind a reverse proxy on the same machine every request looks local: set a token.
    """
    if not settings.METRICS_ENABLED:
        raise Http404("metrics are disabled (METRICS_ENABLED=false)")
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponse("metrics need Authorization: Bearer <METRICS_TOKEN>\n", status=401, content_type="text/plain",
                                headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    elif not _from_this_machine(request):
        return HttpResponse("metrics are served to this machine only; set METRICS_TOKEN to scrape them from elsewhere\n", status=403,
                            content_type="text/plain")
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
