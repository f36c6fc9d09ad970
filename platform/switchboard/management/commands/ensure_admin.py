"""``manage.py ensure_admin``: make sure the console's admin account exists, idempotently.

The account comes from ``ADMIN_USERNAME`` (default ``admin``), ``ADMIN_EMAIL`` and ``ADMIN_PASSWORD``.
Without a password, a new account gets a generated one, printed once and written to
``VAR_DIR/admin-credentials.txt`` (mode 0600); later runs only say where it is. The database keeps
only Django's password hash.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from sbcommon.env import envstr

CREDENTIALS_FILE = "admin-credentials.txt"


def credentials_path() -> Path:
    return Path(settings.VAR_DIR) / CREDENTIALS_FILE


def write_credentials(path: Path, username: str, password: str) -> None:
    """Write the generated credentials readable by the owner only (created 0600, never wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file that already existed
        os.write(fd, f"username: {username}\npassword: {password}\n".encode())
    finally:
        os.close(fd)


def read_credentials(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, sep, value in (line.partition(": ") for line in lines) if sep}


class Command(BaseCommand):
    help = "Create the admin account from ADMIN_USERNAME/ADMIN_EMAIL/ADMIN_PASSWORD (a generated password if none); safe to rerun."

    def handle(self, *args, **options):
        username = envstr("ADMIN_USERNAME", "admin")
        email = envstr("ADMIN_EMAIL", "")
        password = os.environ.get("ADMIN_PASSWORD", "")
        path = credentials_path()
        User = get_user_model()

        with transaction.atomic():
            user = User.objects.filter(username=username).first()
            if user is None:
                generated = not password
                if generated:
                    password = secrets.token_urlsafe(18)
                User.objects.create_superuser(username=username, email=email, password=password)
                if generated:
                    write_credentials(path, username, password)
                    self.stdout.write(self.style.SUCCESS(f"created admin account {username!r} with password: {password}"))
                    self.stdout.write(f"  (printed once; also written to {path}, readable by you only)")
                else:
                    self.stdout.write(self.style.SUCCESS(f"created admin account {username!r} with the password from ADMIN_PASSWORD"))
                return

            changed = []
            if not (user.is_superuser and user.is_staff and user.is_active):
                user.is_superuser = user.is_staff = user.is_active = True
                changed.append("admin rights")
            if email and user.email != email:
                user.email = email
                changed.append("email")
            if password and not user.check_password(password):
                user.set_password(password)
                changed.append("password (from ADMIN_PASSWORD)")
            if changed:
                user.save()
                if password and read_credentials(path).get("username") == username:
                    path.unlink(missing_ok=True)  # the generated password no longer works: do not leave it lying around
                self.stdout.write(self.style.SUCCESS(f"admin account {username!r} updated: {', '.join(changed)}"))
                return

        if password:
            self.stdout.write(f"admin account {username!r} exists; its password is the one in ADMIN_PASSWORD")
            return
        saved = read_credentials(path)
        if saved.get("username") == username and user.check_password(saved.get("password", "")):
            self.stdout.write(f"admin account {username!r} exists; its generated password is in {path}")
        else:
            self.stdout.write(
                f"admin account {username!r} exists; its password was set elsewhere "
                "(set ADMIN_PASSWORD and rerun to reset it)"
            )
