"""``manage.py ingest_docs --expert SLUG PATH...``: add documents to an expert's knowledge base in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from experts.models import Expert
from jobs.services import ConsoleReporter
from knowledge import ingest


class Command(BaseCommand):
    help = (
        "Add documents (text, Markdown, HTML, PDF, .docx, JSON Lines; folders are walked) to an expert's knowledge base and index "
        "them, in this process. Unchanged files change nothing; changed ones become new versions."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("paths", nargs="+", help="Files or folders.")
        parser.add_argument("--expert", required=True, help="The expert's slug.")
        parser.add_argument("--no-index", action="store_true", help="Store the documents only; index them later (console, or a job).")

    def handle(self, *args: Any, **options: Any) -> None:
        expert = Expert.objects.filter(slug=options["expert"]).first()
        if expert is None:
            raise CommandError(f"no expert with slug {options['expert']!r}")
        missing = [p for p in options["paths"] if not Path(p).exists()]
        if missing:
            raise CommandError(f"no such file or folder: {', '.join(missing)}")
        paths = ingest.walk_paths(options["paths"])
        if not paths:
            raise CommandError("no files found under the given paths")
        limit = ingest.max_upload_bytes()
        too_big = [p for p in paths if p.stat().st_size > limit]
        for path in too_big:
            self.stderr.write(f"  {path}: {path.stat().st_size:,} bytes; the limit is {limit:,} bytes (DOCUMENT_UPLOAD_MAX_BYTES): skipped")
        paths = [p for p in paths if p not in too_big]
        self.stdout.write(f"Ingesting {len(paths)} file{'s' if len(paths) != 1 else ''} into {expert.name} ({expert.slug})")
        progress = ConsoleReporter(out=self.stderr, tty=self.stderr.isatty())
        try:
            report = ingest.ingest_files(expert, [(p.name, p) for p in paths], reporter=progress, index=not options["no_index"])
        finally:
            if progress.tty:
                self.stderr.write("")
        self._print(report, too_big)
        if report.failed or too_big:
            raise CommandError(f"{len(report.failed) + len(too_big)} file(s) could not be ingested; the others were")

    def _print(self, report: ingest.IngestReport, too_big: list[Path]) -> None:
        w = self.stdout.write
        for outcome in report.files:
            if outcome.get("error"):
                w(self.style.ERROR(f"  {outcome['file']}: {outcome['error']}"))
                continue
            states = ", ".join(f"{outcome[k]} {k}" for k in ("created", "updated", "unchanged") if outcome[k])
            w(f"  {outcome['file']} ({outcome.get('kind')}): {states}")
            for line in outcome.get("skipped_lines", [])[:10]:
                w(f"    skipped {line}")
        indexing = report.indexing
        w(f"  documents  created {report.created}, updated {report.updated}, unchanged {report.unchanged}")
        if indexing:
            w(f"  indexed    {indexing.get('documents', 0)} documents, {indexing.get('chunks', 0)} chunks")
        if not report.failed and not too_big:
            w(self.style.SUCCESS("Done."))
