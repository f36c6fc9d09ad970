"""What ``evaluate`` and ``bench`` share: the options of every subcommand, the report's output, the throw-away workspace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


def names(text: str) -> list[str]:
    """A comma-separated option's names, blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


class ReportCommand(BaseCommand):
    """A command whose subcommands each print a JSON report."""

    def common_options(self, *parsers) -> None:
        """``--json FILE``, and the ``--skip-checks`` that call_command passes (subparsers do not inherit BaseCommand's options)."""
        for p in parsers:
            p.add_argument("--json", dest="json_path", default=None, help="also write the report to this file")
            p.add_argument("--skip-checks", action="store_true", help="skip Django system checks")

    def emit(self, report: dict, json_path: str | None) -> None:
        """Print the report as JSON and, with ``--json``, write it there too (atomically: a temp file renamed)."""
        text = json.dumps(report, indent=2)
        self.stdout.write(text)
        if json_path:
            tmp = Path(f"{json_path}.tmp")
            tmp.write_text(text)
            tmp.replace(json_path)
            self.stdout.write(self.style.SUCCESS(f"wrote {json_path}"))

    def rerun_isolated(self, target: str, disk_cache: bool = True) -> None:
        """Run this command again in a throw-away workspace (``evaluation.workspace.isolated``), the JSON written by the child."""
        from evaluation.workspace import isolated

        command = type(self).__module__.rpartition(".")[2]
        if sys.argv[1:2] != [command]:
            raise CommandError(f"called from code, {command} {target} runs in the caller's database: pass --in-place")
        code = isolated([*sys.argv[1:], "--in-place"], say=self.stdout.write, disk_cache=disk_cache)
        if code:
            raise CommandError(f"the workspace of {command} {target} exited with status {code}")
