"""/metrics: Prometheus' text format with the serving counters, fed by events and the chat API."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serving import events
from tests.factories import make_key

pytestmark = pytest.mark.django_db


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_count_requests_experts_stages_fallbacks_and_errors(client, settings):
    settings.EVENTS_SYNC = True
    before = scrape(client)
    events.record(request_id="a", mode="auto", expert="ssa", status_code=200, embed_ms=20.0, total_ms=40.0, fallback_used=True)
    events.record(request_id="b", mode="auto:fast", expert="", status_code=503, error_kind="no_expert_available", total_ms=5.0)
    after = scrape(client)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("switchboard_requests_total", mode="auto", status="200") == 1
    assert delta("switchboard_requests_total", mode="auto:fast", status="503") == 1
    assert delta("switchboard_expert_requests_total", expert="ssa") == 1
    assert delta("switchboard_errors_total", kind="no_expert_available") == 1
    assert delta("switchboard_fallbacks_total") == 1
    assert delta("switchboard_stage_latency_seconds_count", stage="embed") == 1
    assert delta("switchboard_stage_latency_seconds_count", stage="total") == 2


def test_refused_requests_are_counted_by_status_and_kind(client):
    before = scrape(client)
    client.get("/v1/models", HTTP_AUTHORIZATION="Bearer sk-sb-wrong")
    client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {make_key('ok').secret}")
    after = scrape(client)
    key401 = ("switchboard_api_responses_total", (("endpoint", "models"), ("status", "401")))
    key200 = ("switchboard_api_responses_total", (("endpoint", "models"), ("status", "200")))
    assert after[key401] - before.get(key401, 0) == 1
    assert after[key200] - before.get(key200, 0) == 1
    bad = ("switchboard_errors_total", (("kind", "invalid_api_key"),))
    assert after[bad] - before.get(bad, 0) == 1


def test_encoder_batch_sizes_are_exported(client):
    from encoders.batching import MicroBatchingEncoder

    class Tiny:
        name, dimension = "tiny", 2

        def encode(self, texts, batch_size=64):
            import numpy as np

            return np.ones((len(texts), 2), dtype=np.float32)

    before = scrape(client).get(("switchboard_encoder_batch_size_count", ()), 0)
    enc = MicroBatchingEncoder(Tiny(), max_batch=4, max_wait_ms=0)
    enc.encode(["one"])
    enc.close()
    assert scrape(client)[("switchboard_encoder_batch_size_count", ())] - before == 1


def test_a_metrics_token_is_required_when_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_metrics_can_be_turned_off(client, settings):
    settings.METRICS_ENABLED = False
    assert client.get("/metrics").status_code == 404


def test_serving_cache_hits_and_misses_are_exported(client):
    from experts.generation.extractive import chunk_cache
    from experts.ml.extractive import Passage

    cache = chunk_cache("metrics-test")
    passage = Passage(text="Renewal costs 64 dollars.", chunk_id="metrics-test-chunk")
    before = scrape(client)
    assert cache.get(passage) is None  # a miss
    cache.put(passage, object())
    assert cache.get(passage) is not None  # a hit
    assert cache.get(passage) is not None  # and another
    after = scrape(client)
    key = "switchboard_cache_lookups_total"
    assert after[(key, (("cache", "chunk_sentences"), ("result", "hit")))] - before.get((key, (("cache", "chunk_sentences"), ("result", "hit"))), 0) == 2
    assert after[(key, (("cache", "chunk_sentences"), ("result", "miss")))] - before.get((key, (("cache", "chunk_sentences"), ("result", "miss"))), 0) == 1
    assert (key, (("cache", "encoder"), ("result", "hit"))) in after
