"""The soak's restarts: their plan, the figures read from the requests around them, and the service always started again."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from evaluation.bench_soak import plan_restarts
from evaluation.soak_restarts import Restart, drive, ensure_up, restart_report, restart_reports

PG = "postgresql://postgres@127.0.0.1:5432/sb"
REDIS = "redis://127.0.0.1:6379/7"


def restart(service="database", stopping=20.0, back=32.0, **kw) -> Restart:
    return Restart(service, stopping, 10.0, "stop", "start", lambda: True, stopping_s=stopping, stopped_s=stopping + 0.5, back_s=back, **kw)


def test_a_database_restart_counts_clean_503s_while_down_and_recovery_from_its_return():
    requests = [
        (19.0, 19.1, "answered"),
        (20.5, 20.6, "503:database_unavailable"),
        (21.0, 21.1, "answered"),  # served without the database (everything it needed was in memory)
        (31.5, 31.6, "503:database_unavailable"),
        (32.2, 32.3, "503:database_unavailable"),  # the first request after the return still met a dead connection
        (32.7, 33.4, "answered"),
        (33.0, 33.2, "503:no_expert_available"),  # a scheduled fault's 503: not the restart's
        (34.0, 34.1, "answered"),
    ]
    report = restart_report(restart(), requests)
    assert report["outcomes_while_down"] == {"503:database_unavailable": 2, "answered": 1}
    assert report["answers_503_while_down"] == 2
    assert report["slowest_while_down_s"] == 0.1
    assert report["unclean_while_down"] == {}
    assert report["failed_after_return"] == 1
    assert report["recovery_s"] == 1.4  # 33.4 - 32.0: the first answer to a request sent after the last failure


def test_a_500_or_a_lost_request_while_the_database_is_down_is_unclean():
    requests = [(21.0, 21.1, "http_500_not_json"), (22.0, 82.0, "ReadTimeout"), (23.0, 23.1, "503:database_unavailable"), (33.0, 33.1, "answered")]
    report = restart_report(restart(), requests)
    assert report["unclean_while_down"] == {"ReadTimeout": 1, "http_500_not_json": 1}


def test_the_caches_restart_may_not_answer_the_databases_503():
    report = restart_report(restart("cache"), [(21.0, 21.1, "503:database_unavailable"), (33.0, 33.1, "answered")])
    assert report["unclean_while_down"] == {"503:database_unavailable": 1}


def test_a_service_that_never_came_back_has_no_recovery():
    report = restart_report(restart(back=None, error="start failed: exit 1"), [(21.0, 21.1, "answered")])
    assert report["recovery_s"] is None
    assert report["error"] == "start failed: exit 1"


def test_each_restarts_aftermath_ends_where_the_next_one_stops():
    first, second = restart(stopping=20.0, back=32.0), restart("cache", stopping=58.0, back=70.0)
    requests = [(40.0, 40.1, "answered"), (59.0, 59.1, "http_500_not_json"), (71.0, 71.2, "answered")]
    reports = restart_reports([second, first], requests)
    assert [r["service"] for r in reports] == ["database", "cache"]
    assert reports[0]["failed_after_return"] == 0
    assert reports[0]["recovery_s"] == 8.1
    assert reports[1]["unclean_while_down"] == {"http_500_not_json": 1}


def test_restarts_need_the_server_the_soak_runs_on_and_room_in_the_run():
    with pytest.raises(ValueError, match="needs --database-url postgresql"):
        plan_restarts(["database"], 90, 10, None, REDIS, {})
    with pytest.raises(ValueError, match="needs --redis-url"):
        plan_restarts(["cache"], 90, 10, PG, None, {})
    with pytest.raises(ValueError, match="do not fit a 30 s run"):
        plan_restarts(["database", "cache"], 30, 10, PG, REDIS, {})
    with pytest.raises(ValueError, match="unknown service"):
        plan_restarts(["broker"], 90, 10, PG, REDIS, {})
    planned = plan_restarts(["cache", "database", "cache"], 90, 10, PG, REDIS, {"db_stop": "pg_ctl stop"})
    assert [(r.service, r.at_s, r.stop) for r in planned] == [("cache", 58.5, "redis-cli -p 6379 shutdown nosave"), ("database", 22.5, "pg_ctl stop")]


def test_a_service_left_down_is_started_again(tmp_path):
    flag = tmp_path / "up"
    down = Restart("cache", 0, 1, "true", f"{sys.executable} -c \"open('{flag}', 'w')\"", flag.exists)
    assert ensure_up(down) == "started"
    assert ensure_up(down) == "up"
    broken = Restart("cache", 0, 1, "true", "false", lambda: False)
    assert ensure_up(broken).startswith("down: 'false' exited with 1")


def test_the_drive_stops_waits_and_starts_then_waits_for_an_answer(tmp_path):
    flag = tmp_path / "up"
    flag.touch()
    planned = Restart("database", 0.0, 0.2, f"rm {flag}", f"touch {flag}", flag.exists)
    said: list[str] = []
    asyncio.run(drive([planned], time.perf_counter(), said.append))
    assert planned.stopped_s is not None
    assert planned.back_s is not None
    assert planned.back_s - planned.stopped_s >= 0.2
    assert flag.exists()
    assert planned.error == ""
    assert "database answers again" in said[-1]
