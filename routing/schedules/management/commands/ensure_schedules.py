"""``manage.py ensure_schedules``: create the default scheduled jobs (django-celery-beat PeriodicTasks) once.

Idempotent: a schedule that exists (perhaps edited or disabled in the console) is left as it is.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from routing.schedules.scheduling import ensure_schedules


class Command(BaseCommand):
    help = "Create the default scheduled jobs (retrain, re-cluster, knowledge refresh, evaluation, drift, load, SRM, retention) that do not exist yet."

    def handle(self, *args, **options):
        for name, created in ensure_schedules(settings.TIME_ZONE):
            if options["verbosity"] >= 1:
                self.stdout.write(f"{name}: {'created' if created else 'exists'}")
