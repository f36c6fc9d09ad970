"""WSGI entry point."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
os.environ.setdefault("ENCODER_PROCESS", "1")
application = get_wsgi_application()
