"""``run_platform`` supervises real processes: it starts worker, beat and web, and stops them all."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children_of(pid: int) -> dict[int, str]:
    """Live child processes of ``pid`` (from /proc), with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found[int(entry.name)] = cmdline
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Platform:
    """``manage.py run_platform`` in a subprocess, its output collected line by line."""

    def __init__(self, env: dict[str, str], port: int, *args: str):
        self.port = port
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "run_platform", "--no-demo", "--port", str(port), "--stop-timeout", "20", *args],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {text!r} from run_platform (exit {self.proc.poll()}):\n{self.output[-4000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def run_platform(project_env, migrate):
    migrate(project_env)
    started: list[Platform] = []

    def start(*args: str) -> Platform:
        started.append(Platform(project_env, free_port(), *args))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def test_ctrl_c_stops_worker_beat_and_web(run_platform):
    p = run_platform()
    p.wait_for("Switchboard is ready")
    children = children_of(p.proc.pid)
    with urllib.request.urlopen(f"http://127.0.0.1:{p.port}/healthz", timeout=10) as response:
        assert response.status == 200

    p.proc.send_signal(signal.SIGINT)

    assert p.proc.wait(timeout=60) == 0
    assert sorted(" worker " in c or " beat " in c or "uvicorn" in c for c in children.values()) == [True, True, True]
    assert [pid for pid in children if alive(pid)] == []
    assert "   run | stopped" in p.output


def test_a_dead_worker_is_started_again_and_a_dead_web_server_stops_everything(run_platform):
    p = run_platform()
    p.wait_for("Switchboard is ready")
    children = children_of(p.proc.pid)
    worker = next(pid for pid, cmd in children.items() if " worker " in cmd)

    os.kill(worker, signal.SIGKILL)  # as the OOM killer would

    p.wait_for("worker exited with code -9; starting it again (1 of 3 restarts in 10 min)")
    deadline = time.monotonic() + 120  # a worker imports torch and the apps: minutes on a loaded 2-core machine
    while not (again := [pid for pid, cmd in children_of(p.proc.pid).items() if " worker " in cmd and pid != worker]):
        assert time.monotonic() < deadline, p.output[-3000:]
        time.sleep(0.2)
    restarted = p.output.index("starting it again")  # under load the first worker may be killed before it said it was ready
    while not re.search(r"worker \| .*@\S+ ready\.", p.output[restarted:]):  # the new worker says it is ready
        assert time.monotonic() < deadline + 120, p.output[-3000:]
        assert p.proc.poll() is None, p.output[-3000:]
        time.sleep(0.2)
    assert p.proc.poll() is None
    web = next(pid for pid, cmd in children.items() if "uvicorn" in cmd)

    os.kill(web, signal.SIGKILL)

    assert p.proc.wait(timeout=60) != 0
    assert [pid for pid in [*children, *again] if alive(pid)] == []
    assert "web exited with code -9; stopped everything" in p.output


def test_with_no_restarts_a_dead_worker_stops_everything(run_platform):
    p = run_platform("--restarts", "0")
    p.wait_for("Switchboard is ready")
    children = children_of(p.proc.pid)
    worker = next(pid for pid, cmd in children.items() if " worker " in cmd)

    os.kill(worker, signal.SIGKILL)

    assert p.proc.wait(timeout=60) != 0
    assert [pid for pid in children if alive(pid)] == []
    assert "worker exited with code -9; stopped everything" in p.output
