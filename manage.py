#!/usr/bin/env python
"""Django's command-line utility, with ``platform/`` put on the import path.

``platform/`` is a plain folder (never a package: that would shadow the standard library module
``platform``), so its packages ``switchboard``, ``sbcommon`` and ``jobs`` are importable by name.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "platform"))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
