"""``manage.py run_platform``: the whole single-machine platform in one foreground command.

With ``--prepare`` (``make run``) it first migrates, ensures the admin account, collects static files
and prepares the base model when ``GENERATOR`` needs one. It starts a Celery worker (and a ``helper``
worker while the demo loads), loads the demo unless ``--no-demo``, starts beat and uvicorn, prints that
it is ready once the demo is loaded and the web server answers, then trains the demo adapters where a
language model writes the answers (``--no-demo-adapters`` skips them). Each child's output is
prefixed with its name. A worker or beat that dies is restarted up to ``--restarts`` times in
``RESTART_WINDOW_S``; any other death stops the rest and exits non-zero. Children run in their own
process groups, and on Linux get SIGTERM if the supervisor itself is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from kombu.utils.url import maybe_sanitize_url

from sbcommon.env import envint, envstr

ROOT = Path(settings.BASE_DIR)

try:  # Linux: ask the kernel to SIGTERM each child when the supervisor dies, even by SIGKILL.
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: children are still stopped on every normal exit path
    _prctl = None
PR_SET_PDEATHSIG = 1


def _child_setup(parent_pid: int):
    def setup() -> None:
        os.setpgrp()
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)

    return setup


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen
    reader: threading.Thread
    expected_exit: bool = False
    restarts: int = 0  # how often it may be started again after dying, within RESTART_WINDOW_S


RESTART_WINDOW_S = 600.0


class Supervisor:
    """Starts named children, relays their output with a prefix, and stops them all."""

    def __init__(self, out, env: dict[str, str]):
        self.out = out
        self.env = env
        self.children: list[Child] = []
        self.lock = threading.Lock()
        self.width = 6
        self.restarted: dict[str, list[float]] = {}  # when each child was started again, by name

    def say(self, name: str, line: str) -> None:
        with self.lock:
            self.out.write(f"{name:>{self.width}} | {line}\n")
            self.out.flush()

    def start(self, name: str, argv: list[str], expected_exit: bool = False, restarts: int = 0) -> Child:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", bufsize=1, preexec_fn=_child_setup(os.getpid()),  # only setpgrp + prctl, no Python locks
        )
        reader = threading.Thread(target=self._relay, args=(name, proc), daemon=True)
        reader.start()
        child = Child(name, argv, proc, reader, expected_exit, restarts)
        self.children.append(child)
        return child

    def _relay(self, name: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.say(name, line.rstrip("\n"))

    def dead(self) -> Child | None:
        """The first child that exited when it should not have and may not be started again, if any.

        A child allowed restarts that has used fewer than its ``restarts`` in the last
        ``RESTART_WINDOW_S`` is started again here instead, with the same command.
        """
        for child in list(self.children):
            if child.proc.poll() is None or child.expected_exit:
                continue
            now = time.monotonic()
            recent = [t for t in self.restarted.get(child.name, []) if now - t < RESTART_WINDOW_S]
            if len(recent) >= child.restarts:
                return child
            self.restarted[child.name] = [*recent, now]
            self.say("run", f"{child.name} exited with code {child.proc.returncode}; starting it again "
                            f"({len(recent) + 1} of {child.restarts} restarts in {RESTART_WINDOW_S / 60:.0f} min)")
            child.reader.join(timeout=2)
            self.children.remove(child)
            self.start(child.name, child.argv, restarts=child.restarts)
        return None

    def running(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is None]

    def signal_all(self, sig: int) -> None:
        for child in reversed(self.children):  # the last started (web) goes first
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, sig)

    def stop_all(self, timeout: float, force: threading.Event) -> None:
        """SIGTERM every child, wait up to ``timeout`` seconds, then SIGKILL what is left."""
        if not self.running():
            return
        self.say("run", f"stopping {', '.join(c.name for c in self.running())} ...")
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline and not force.is_set():
            time.sleep(0.1)
        if self.running():
            self.say("run", f"killing {', '.join(c.name for c in self.running())} (did not stop in time)")
            self.signal_all(signal.SIGKILL)
        for child in self.children:
            child.proc.wait()
            child.reader.join(timeout=2)


class _Lines:
    """A file-like ``stdout`` for ``call_command`` that prints each line through the supervisor, prefixed."""

    def __init__(self, sup: Supervisor, name: str):
        self.sup, self.name, self.partial = sup, name, ""

    def write(self, text: str) -> None:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            self.sup.say(self.name, line)

    def flush(self) -> None:
        """Nothing: a line is printed once it ends ("Applying ... OK" is written in two parts, flushed between)."""

    def close(self) -> None:
        if self.partial:
            self.sup.say(self.name, self.partial)
            self.partial = ""


def _first_request(url: str, timeout: float, stop: threading.Event) -> None:
    """GET ``url`` until it answers at all (any status), for at most ``timeout`` seconds or until ``stop``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.wait(0.5):
        try:
            with urllib.request.urlopen(url, timeout=30):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            pass


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def demo_state() -> tuple[bool, str]:
    """Whether the bundled demo is already loaded: its experts are active and an active router covers them."""
    from experts.selectors import active_experts
    from routing.models import RouterVersion

    try:
        agencies = set(json.loads((Path(settings.DEMO_DIR) / "agencies.json").read_text()))
    except (OSError, ValueError):
        return False, "no demo found"
    have = set(active_experts().values_list("slug", flat=True))
    router = RouterVersion.objects.filter(is_active=True).first()
    if agencies <= have and router is not None and agencies <= set(router.experts):
        return True, f"{len(agencies)} demo experts active, router v{router.version}"
    return False, f"{len(agencies & have)}/{len(agencies)} demo experts, {f'router v{router.version}' if router else 'no router'}"


class Command(BaseCommand):
    help = "Run the worker, beat, the demo loader and the web server together; Ctrl-C stops them all."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=envstr("HOST", "127.0.0.1"), help="Address to serve on (env HOST, default 127.0.0.1).")
        parser.add_argument("--port", type=int, default=envint("PORT", 8000), help="Port to serve on (env PORT, default 8000).")
        parser.add_argument("--prepare", action="store_true",
                            help="First migrate, ensure the admin account, collect static files and prepare the base model when needed (make run).")
        parser.add_argument("--no-demo", action="store_true", help="Do not load the bundled demo.")
        parser.add_argument("--reload-demo", action="store_true", help="Run load_demo even when the demo is already loaded.")
        parser.add_argument("--no-demo-adapters", action="store_true",
                            help="Do not train the demo experts' adapters in the background once the server is ready.")
        parser.add_argument("--no-beat", action="store_true", help="Do not start Celery beat.")
        parser.add_argument("--queues", default=envstr("WORKER_QUEUES", "cpu,gpu"), help="Queues the worker consumes (env WORKER_QUEUES).")
        parser.add_argument("--restarts", type=int, default=3,
                            help="How often a dead worker or beat is started again within 10 minutes before everything stops (default 3; 0: never).")
        parser.add_argument("--stop-timeout", type=float, default=30.0, help="Seconds to wait for children to stop before killing them.")
        parser.add_argument("--ready-timeout", type=float, default=180.0, help="Seconds to wait for /readyz after the web server starts.")

    def handle(self, *args, **options):
        host, port = options["host"], options["port"]
        base = f"http://{_display_host(host)}:{port}"
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is already in use; set PORT (or --port) to another port")

        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "platform"), str(ROOT), env.get("PYTHONPATH", "")] if p)
        env["DJANGO_SETTINGS_MODULE"] = env.get("DJANGO_SETTINGS_MODULE", "switchboard.settings")
        env["PYTHONUNBUFFERED"] = "1"
        python = sys.executable
        sup = Supervisor(self.stdout, env)

        stop, force = threading.Event(), threading.Event()

        def on_signal(signum, frame):
            if stop.is_set():
                force.set()  # a second Ctrl-C: do not wait for a graceful stop
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        failure: str | None = None
        try:
            failure = self._run(sup, python, host, port, base, options, stop)
        finally:
            sup.stop_all(options["stop_timeout"], force)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if failure:
            raise CommandError(failure)
        sup.say("run", "stopped")

    def _prepare(self, sup: Supervisor) -> None:
        """What ``make run`` did as four commands, in this process: Django and the apps start once instead of four times."""
        from django.core.management import call_command

        for name, args, kwargs in (
            ("migrate", [], {"interactive": False}),
            ("ensure_admin", [], {}),
            ("collectstatic", [], {"interactive": False, "verbosity": 0}),
            ("prepare_base_model", ["--when-needed"], {}),
        ):
            sup.say("run", f"manage.py {' '.join([name, *args])}")
            out = _Lines(sup, "setup")
            call_command(name, *args, stdout=out, stderr=out, **kwargs)
            out.close()

    def _run(self, sup: Supervisor, python: str, host: str, port: int, base: str, options, stop: threading.Event) -> str | None:
        var = Path(settings.VAR_DIR)
        if not options["no_demo"]:
            from .prepare_encoder import needs_export

            if needs_export():  # the demo's first job would export it; here it is done while the database migrates and the workers start
                sup.start("export", [python, str(ROOT / "manage.py"), "prepare_encoder"], expected_exit=True)
        if options["prepare"]:
            self._prepare(sup)
        sup.say("run", f"data in {var}; broker {maybe_sanitize_url(settings.CELERY_BROKER_URL)}; database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
        restarts = max(0, options["restarts"])
        worker = [python, "-m", "celery", "-A", "switchboard", "worker", "-Q", options["queues"], "-c", "1", "--pool=solo",
                  "--loglevel=INFO", "--without-gossip", "--without-mingle"]
        sup.start("worker", [*worker, "-n", "switchboard@%h"], restarts=restarts)
        if not options["no_beat"]:
            from django.core.management import call_command  # the default scheduled jobs (routing.experiments), created once

            from operations.services import ensure_backup_schedule

            call_command("ensure_schedules", verbosity=0)
            ensure_backup_schedule(settings.TIME_ZONE)

        def serve() -> None:
            if not options["no_beat"]:
                sup.start("beat", [python, "-m", "celery", "-A", "switchboard", "beat", "--loglevel=INFO",
                                   "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", str(var / "celerybeat-schedule")],
                          restarts=restarts)
            sup.start("web", [python, "-m", "uvicorn", "switchboard.asgi:application", "--host", host, "--port", str(port),
                              "--lifespan", "on", "--timeout-graceful-shutdown", "10"])

        served = False
        if not options["no_demo"]:
            loaded, why = demo_state()
            if loaded and not options["reload_demo"]:
                sup.say("run", f"demo already loaded ({why}); skipping it (make demo or --reload-demo runs it again)")
            else:
                sup.say("run", f"loading the demo through the workers ({why}) ...")
                helper: Child | None = None

                def on_step(number: int) -> None:
                    nonlocal helper, served
                    if number == 2 and helper is None:
                        # A second worker while the demo loads: the experts' index jobs run two at a time (step 5).
                        helper = sup.start("helper", [*worker, "-n", "helper@%h"], expected_exit=True)
                    elif number == 6 and not served:
                        # The router trains on one core: beat and the web server start on the other. The banner
                        # still waits for the router, and the web server warms it up once it is there.
                        serve()
                        served = True
                        # Its first request loads Django's URLs and views (seconds): made now, not after the demo.
                        threading.Thread(target=_first_request, args=(f"{base}/readyz", options["ready_timeout"], stop), daemon=True).start()

                failure = self._load_demo(sup, stop, on_step)
                if helper is not None and helper.proc.poll() is None:  # idle by now: every demo job has ended
                    os.killpg(helper.proc.pid, signal.SIGTERM)
                if failure is not None or stop.is_set():
                    return failure
                if served:
                    # The web server may have read "no router yet" just before the router was activated, and
                    # serving keeps what it read for SERVING_CACHE_TTL_S: past that, every question finds the router.
                    stop.wait(settings.SERVING_CACHE_TTL_S)
        if not served:
            serve()

        ready = self._wait_ready(sup, base, options["ready_timeout"], stop)
        if ready is not None:
            return ready
        if not stop.is_set():
            self._banner(sup, base)
            if not options["no_demo"] and not options["no_demo_adapters"]:
                from switchboard.demo import adapters_wanted

                wanted, why = adapters_wanted()
                if wanted:  # in the background: the base model answers until an adapter beats it
                    sup.start("adapt", [python, str(ROOT / "manage.py"), "train_demo_adapters"], expected_exit=True)
                else:
                    sup.say("run", f"demo experts answer without adapters ({why})")

        while not stop.wait(0.2):
            if (dead := sup.dead()) is not None:
                return f"{dead.name} exited with code {dead.proc.returncode}; stopped everything"
        return None

    def _load_demo(self, sup: Supervisor, stop: threading.Event, on_step: Callable[[int], None]) -> str | None:
        """``load_demo`` on a thread of this process (Django is loaded here already); the failure, if any.

        ``on_step`` is called here, on the supervisor's thread, with each step's number as it starts.
        """
        from django.db import connection

        from switchboard.demo import DemoFailed, load_demo

        outcome: dict[str, str] = {}
        steps: queue.SimpleQueue[int] = queue.SimpleQueue()

        def run() -> None:
            try:
                sup.say("demo", f"demo ready: {load_demo(say=lambda line: sup.say('demo', line), on_step=steps.put)}")
            except DemoFailed as exc:
                outcome["failure"] = f"load_demo failed: {exc}"
            except Exception as exc:  # anything else stops the platform too, with its reason
                outcome["failure"] = f"load_demo failed: {exc.__class__.__name__}: {exc}"
            finally:
                connection.close()

        thread = threading.Thread(target=run, name="load-demo", daemon=True)
        thread.start()
        while thread.is_alive() or not steps.empty():
            while not steps.empty():
                on_step(steps.get())
            if stop.wait(0.2):
                return None
            if (dead := sup.dead()) is not None:
                return f"{dead.name} exited with code {dead.proc.returncode} while the demo was loading; stopped everything"
        return outcome.get("failure")

    def _wait_ready(self, sup: Supervisor, base: str, timeout: float, stop: threading.Event) -> str | None:
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if stop.wait(0.5):
                return None
            if (dead := sup.dead()) is not None:
                return f"{dead.name} exited with code {dead.proc.returncode} before the platform was ready; stopped everything"
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=5) as response:
                    if response.status == 200:
                        return None
            except urllib.error.HTTPError as exc:  # 503: up, but a dependency is not ready yet
                last = exc.read().decode(errors="replace")[:300]
            except (urllib.error.URLError, OSError):
                pass
        sup.say("run", f"warning: {base}/readyz did not answer 200 within {timeout:.0f} s: {last or 'no answer'}; still running")
        return None

    def _banner(self, sup: Supervisor, base: str) -> None:
        username = envstr("ADMIN_USERNAME", "admin")
        if os.environ.get("ADMIN_PASSWORD"):
            where = "the password in ADMIN_PASSWORD"
        else:
            from .ensure_admin import credentials_path

            path = credentials_path()
            where = f"the password in {path}" if path.exists() else "the password you set (manage.py ensure_admin / changepassword)"
        auth = " (needs a login: CHAT_API_REQUIRE_AUTH=true)" if settings.CHAT_API_REQUIRE_AUTH else ""
        lines = [
            "",
            f"Switchboard is ready at {base}/",
            f"  console:   {base}/   (log in as {username!r} with {where})",
            f"  admin:     {base}/admin/",
            f"  API docs:  {base}/api/docs/",
            f"  health:    {base}/healthz  {base}/readyz",
            f"  try it{auth}:",
            f"    curl -s {base}/v1/chat/completions -H 'content-type: application/json' \\",
            """      -d '{"model": "auto", "messages": [{"role": "user", "content": "How do I apply for retirement benefits?"}]}'""",
            "  Ctrl-C stops everything.",
            "",
        ]
        for line in lines:
            sup.say("run", line)
