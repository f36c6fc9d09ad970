"""``manage.py prepare_encoder``: export the sentence encoder for ONNX Runtime now, if it is not exported yet.

The first embedding job would do it (``encoders.onnx_encoder.ensure_exported``, 15 to 25 s here);
``run_platform`` runs this in a process of its own while the database migrates and the workers
start, and a job that asks meanwhile waits for this export instead of making its own. Nothing to do
for the torch backends.
"""

from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from encoders import model_name, resolve_backend, resolve_model_path


def _export_folder() -> tuple[str, str, Path]:
    from encoders.onnx_encoder import export_dir

    name = model_name(settings.EMBEDDING_MODEL)
    path = resolve_model_path(name)
    return name, path, export_dir(path, settings.ENCODER_EXPORT_DIR, label=name)


def needs_export() -> bool:
    """Whether the encoder runs on ONNX Runtime and its export is not there yet."""
    return resolve_backend().startswith("onnx") and not (_export_folder()[2] / "meta.json").is_file()


class Command(BaseCommand):
    help = "Export the sentence encoder for ONNX Runtime (EMBEDDING_BACKEND=onnx*) if that is not done yet."
    requires_system_checks: list[str] = []  # run beside run_platform, which has checked

    def handle(self, *args, **options):
        if not resolve_backend().startswith("onnx"):
            self.stdout.write(f"EMBEDDING_BACKEND={settings.EMBEDDING_BACKEND}: nothing to export")
            return
        from encoders.onnx_encoder import ensure_exported

        started = time.monotonic()
        name, path, folder = _export_folder()
        if (folder / "meta.json").is_file():
            self.stdout.write(f"{name} is exported already ({folder})")
            return
        ensure_exported(path, settings.ENCODER_EXPORT_DIR, label=name)
        self.stdout.write(f"{name} exported for ONNX Runtime in {time.monotonic() - started:.0f} s ({folder})")
