"""WSGI entry point."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
os.environ.setdefault("ENCODER_PROCESS", "1")
application = get_wsgi_application()

from sbcommon.gcfreeze import freeze_after_requests, freeze_startup_objects  # noqa: E402  (after Django is set up)

freeze_startup_objects()  # the collector skips what is loaded by now (see sbcommon.gcfreeze)
freeze_after_requests()
