"""``manage.py import_queries FILE [--team NAME]``: import a CSV/TSV/JSONL query log in this process and print the report."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from jobs.services import ConsoleReporter
from labeling import services

SHOWN_ERRORS = 20


class Command(BaseCommand):
    help = (
        "Import a query log (CSV/TSV with a 'text' column, or JSON Lines) in this process: streamed, one transaction per "
        "batch, rows already imported are skipped, invalid rows are reported with their line numbers."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="Path of the .csv, .tsv or .jsonl file.")
        parser.add_argument("--source", default="", help="Where the queries come from (default: the file name without extension).")
        parser.add_argument("--redact", action="store_true", help="Replace e-mail addresses and phone numbers in the text before storing it.")
        parser.add_argument("--team", default="", help="The team (group name) the queries belong to; its members review them. Default: none, staff only.")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        if not os.path.isfile(path):
            raise CommandError(f"{path}: no such file")
        team = None
        if options["team"]:
            team = Group.objects.filter(name=options["team"]).first()
            if team is None:
                raise CommandError(f"no team named {options['team']!r}; teams: {', '.join(Group.objects.order_by('name').values_list('name', flat=True)) or 'none'}")
        source = options["source"].strip()[:128] or services.default_source(path)
        size = os.path.getsize(path)
        self.stdout.write(
            f"Importing {path} ({size:,} bytes) as source '{source}'" + (f" of team {team.name}" if team else " (no team: staff only)")
            + (", redacting" if options["redact"] else "")
        )
        progress = ConsoleReporter(out=self.stderr, tty=self.stderr.isatty())
        try:
            with open(path, "rb") as handle:
                report = services.import_queries(
                    handle, os.path.basename(path), source, redact=options["redact"], reporter=progress, total_bytes=size, team=team,
                )
        except services.ImportRejected as exc:
            raise CommandError(f"{path}: {exc}; nothing was imported") from exc
        finally:
            if progress.tty:
                self.stderr.write("")
        self._print(report)
        if report.failed_batches:
            raise CommandError(f"{report.failed_rows} rows were not imported because the database refused their batch; run the same command again to import them")

    def _print(self, report: services.ImportReport) -> None:
        w = self.stdout.write
        w(f"  rows read   {report.rows:>10,}")
        w(f"  imported    {report.imported:>10,}")
        w(f"  duplicates  {report.duplicates:>10,}  (already imported, or repeated in the file)")
        w(f"  rejected    {report.error_count:>10,}")
        for error in report.errors[:SHOWN_ERRORS]:
            w(f"    line {error['line']}: {error['reason']}")
        if report.error_count > SHOWN_ERRORS:
            w(f"    ... and {report.error_count - SHOWN_ERRORS:,} more rejected lines")
        for batch in report.failed_batches:
            w(self.style.ERROR(f"  lines {batch['first_line']}-{batch['last_line']} not imported ({batch['rows']} rows): {batch['reason']}"))
        if not report.failed_batches:
            w(self.style.SUCCESS(f"Done: {report.imported:,} new queries."))
