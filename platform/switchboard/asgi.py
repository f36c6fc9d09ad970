"""ASGI entry point (served by uvicorn; needed for streaming responses)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
application = get_asgi_application()
