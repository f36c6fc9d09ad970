"""``manage.py backup --to DIR``: one consistent backup of the database, vector collections and artefacts (``operations.backup``)."""

from django.core.management.base import BaseCommand, CommandError

from operations.backup import BackupRefused, backup


class Command(BaseCommand):
    help = "Back up the database, the vector collections, routers, adapters and uploads into a new or empty folder, while the platform serves."
    requires_system_checks: list[str] = []  # a backup must not depend on the settings' checks passing

    def add_arguments(self, parser):
        parser.add_argument("--to", required=True, metavar="DIR", help="the backup's folder (new or empty)")
        parser.add_argument("--include-secrets", action="store_true", help="also copy the secret key (by default only where it is kept is recorded)")

    def handle(self, *args, **options):
        try:
            backup(options["to"], include_secrets=options["include_secrets"], say=self.stdout.write)
        except BackupRefused as exc:
            raise CommandError(str(exc)) from exc
