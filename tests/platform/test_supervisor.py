"""``run_platform``'s supervisor starts a dying child again within its budget, then gives up on it."""

from __future__ import annotations

import io
import sys
import time

from switchboard.management.commands import run_platform
from switchboard.management.commands.run_platform import Supervisor


def _wait_exit(child) -> None:
    child.proc.wait(timeout=30)


def test_a_child_that_keeps_dying_is_started_again_up_to_its_budget_then_reported():
    out = io.StringIO()
    sup = Supervisor(out, env={})
    first = sup.start("worker", [sys.executable, "-c", "raise SystemExit(3)"], restarts=2)
    seen = [first.proc.pid]
    for attempt in (1, 2):
        _wait_exit(sup.children[-1])
        assert sup.dead() is None  # started again instead
        assert f"worker exited with code 3; starting it again ({attempt} of 2 restarts in 10 min)" in out.getvalue()
        seen.append(sup.children[-1].proc.pid)
    _wait_exit(sup.children[-1])
    dead = sup.dead()
    assert dead is not None
    assert dead.name == "worker"
    assert dead.proc.returncode == 3
    assert len(set(seen)) == 3
    assert len(sup.children) == 1


def test_restarts_older_than_the_window_do_not_count():
    out = io.StringIO()
    sup = Supervisor(out, env={})
    sup.restarted["beat"] = [time.monotonic() - run_platform.RESTART_WINDOW_S - 1]  # long ago
    child = sup.start("beat", [sys.executable, "-c", "pass"], restarts=1)
    _wait_exit(child)
    assert sup.dead() is None
    assert "(1 of 1 restarts in 10 min)" in out.getvalue()
    _wait_exit(sup.children[-1])
    assert sup.dead() is not None


def test_a_child_without_restarts_is_reported_at_once():
    sup = Supervisor(io.StringIO(), env={})
    child = sup.start("web", [sys.executable, "-c", "raise SystemExit(1)"])
    _wait_exit(child)
    assert sup.dead() is child
