"""``manage.py train_adapter --expert SLUG [--rank N ...]``: train an expert's LoRA adapter in this process."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from experts import services
from experts.ml.lora_errors import LoraError
from experts.models import Expert, ExpertVersion
from jobs.models import Job
from jobs.services import run_job


class Command(BaseCommand):
    help = (
        "Train a LoRA adapter for an expert on its training examples, here and now (the console queues the same work as a "
        "Celery job). Prints the held-out loss, perplexity and time per step; the result is a candidate version."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--expert", required=True)
        defaults = services.default_training_params()
        for name in ("rank", "alpha", "batch_size", "max_length", "checkpoint_steps", "max_steps", "top_layers"):
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=defaults[name])
        for name in ("dropout", "epochs", "learning_rate"):
            parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=defaults[name])
        parser.add_argument("--target-modules", default=",".join(defaults["target_modules"]))
        parser.add_argument("--activate", action="store_true", help="Serve the new version when training succeeds.")

    def handle(self, *args: Any, **options: Any) -> None:
        expert = Expert.objects.filter(slug=options["expert"]).first()
        if expert is None:
            raise CommandError(f"no expert with slug {options['expert']!r}")
        params = {k: options[k] for k in services.default_training_params() if k in options}
        params["target_modules"] = options["target_modules"]
        try:
            parsed = services.check_training_inputs(expert, params)
        except LoraError as exc:
            raise CommandError(str(exc)) from None
        job = Job.objects.create(kind="train_adapter", key=f"train_adapter:{expert.slug}", title=f"Train the {expert.name} adapter (shell)",
                                 params={"expert": expert.slug, "lora": parsed.as_dict()})
        started = time.perf_counter()
        job = run_job(job.pk, services.train_adapter_job)
        seconds = time.perf_counter() - started
        if job is None or job.status != "succeeded":
            raise CommandError(job.error if job else "the job could not be claimed")
        result = job.result
        self.stdout.write(
            f"{expert.slug} v{result['version']}: {result['steps']} steps in {seconds:.1f} s ({seconds / max(1, result['steps']):.2f} s/step incl. loading), "
            f"held-out loss {result['eval_loss']}, perplexity {result['eval_perplexity']}, last training loss {result['train_loss']}"
        )
        if options["activate"]:
            services.activate_version(ExpertVersion.objects.get(expert=expert, version=result["version"]))
            self.stdout.write(f"v{result['version']} now serves {expert.slug}")
