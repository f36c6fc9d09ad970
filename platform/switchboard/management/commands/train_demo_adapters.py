"""``manage.py train_demo_adapters``: grounded examples and one adapter training per demo expert (queued on the worker)."""

from django.core.management.base import BaseCommand, CommandError

from switchboard.demo import DemoFailed, adapters_wanted, train_adapters


class Command(BaseCommand):
    help = ("Build each demo expert's grounded training examples and queue its adapter training; an adapter is activated "
            "only when it beats the base model on the expert's held-out questions. Needs a running Celery worker.")

    def add_arguments(self, parser):
        parser.add_argument("--steps", type=int, default=None, help="Training steps per expert (default: DEMO_ADAPTER_STEPS; 0: the training's epochs decide).")
        parser.add_argument("--wait", action="store_true", help="Wait for the trainings and print each gate's figures.")
        parser.add_argument("--force", action="store_true", help="Queue them even when GENERATOR=extractive.")

    def handle(self, *args, **options):
        wanted, why = adapters_wanted()
        if not wanted and not options["force"]:
            self.stdout.write(f"no adapters trained: {why}; --force trains them anyway")
            return
        try:
            summary = train_adapters(say=self.stdout.write, max_steps=options["steps"], wait_for_training=options["wait"])
        except DemoFailed as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"demo adapters: {summary}"))
