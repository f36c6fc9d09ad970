"""The soak bench's bookkeeping (the run itself is `manage.py bench soak`, which prints its figures)."""

from __future__ import annotations

import json
import os

from evaluation.bench_soak import Tally, _classify, rss_mb, schedule


def test_every_response_is_an_answer_a_clean_error_or_lost():
    tally = Tally()
    answer = {"id": "chatcmpl-1", "choices": [{"message": {"content": "Renew online [1]"}}], "switchboard": {"expert": "ssa", "failover_from": [{"slug": "dmv"}]}}
    _classify(tally, 200, json.dumps(answer).encode(), 120.0)
    _classify(tally, 503, b'{"error": {"type": "service_unavailable", "code": "no_expert_available", "message": "all down"}}', 30.0)
    _classify(tally, 502, b"<html>Bad gateway</html>", 5.0)
    _classify(tally, 200, b'{"choices": [{"message": {"content": ""}}]}', 5.0)
    assert tally.answered == ["chatcmpl-1"]
    assert tally.fallbacks == 1
    assert tally.answered_by == {"ssa": 1}
    assert tally.errors == {"503:no_expert_available": 1}
    assert tally.lost == {"http_502_not_json": 1, "empty_answer": 1}
    assert tally.latencies_ms == [120.0, 30.0]


def test_the_fault_schedule_fits_inside_the_run_and_names_real_experts():
    phases = schedule(300, ["dmv", "ssa", "va"])
    assert [p.name for p in phases] == ["generator", "vector_store", "vector_store", "generator"]
    assert phases[0].spec["experts"] == ["dmv"]
    assert phases[0].seconds == 20
    assert all(p.start + p.seconds <= 300 for p in phases)


def test_resident_memory_is_read_from_proc():
    assert 5 < rss_mb(os.getpid()) < 100_000
