"""``manage.py load_demo``: run the bundled doc2dial demo through the real pipeline (Celery jobs)."""

from django.core.management.base import BaseCommand, CommandError

from switchboard.demo import DemoFailed, load_demo


class Command(BaseCommand):
    help = "Import, cluster, promote, index and train on the bundled demo. Needs a running Celery worker (or CELERY_TASK_ALWAYS_EAGER=1)."

    def add_arguments(self, parser):
        parser.add_argument("--demo-dir", help="Folder holding queries.jsonl, documents/ and agencies.json (default: DEMO_DIR).")

    def handle(self, *args, **options):
        try:
            summary = load_demo(options.get("demo_dir"), say=self.stdout.write)
        except DemoFailed as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"demo ready: {summary}"))
