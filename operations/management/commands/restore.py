"""``manage.py restore --from DIR``: a backup into an empty database and data folder, or a one-line refusal (``operations.restore``)."""

from django.core.management.base import BaseCommand, CommandError

from operations.backup import BackupRefused
from operations.restore import check, restore


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database and data folder (refused, with the reason, otherwise)."
    requires_system_checks: list[str] = []  # the empty database the restore fills has no tables for the checks to read

    def add_arguments(self, parser):
        parser.add_argument("--from", required=True, dest="source", metavar="DIR", help="the backup's folder")
        parser.add_argument("--check", action="store_true", help="only check that the backup is complete and can be restored here")

    def handle(self, *args, **options):
        try:
            if options["check"]:
                manifest = check(options["source"])
                self.stdout.write(f"restorable: made {manifest['created_at']}, {len(manifest['files'])} files, {manifest['bytes']:,} bytes")
                return
            restore(options["source"], say=self.stdout.write)
        except BackupRefused as exc:
            raise CommandError(str(exc)) from exc
