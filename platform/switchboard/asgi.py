"""ASGI entry point (served by uvicorn; needed for streaming responses)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
application = get_asgi_application()


def _warm_up() -> None:
    """Load the sentence encoder before the first request instead of during it (~3 s on a laptop)."""
    try:
        from sbcommon.encoders import get_encoder

        get_encoder().encode(["warm-up"])
        from experts.generation.transformers import warm_up_hottest  # GENERATOR=transformers: load the busiest adapters
        from routing.selectors import traffic_by_expert

        warm_up_hottest(traffic_by_expert)
    except Exception:  # a broken model shows up in /readyz; warming up is best effort
        import logging

        logging.getLogger(__name__).exception("encoder warm-up failed")


if os.environ.get("SWITCHBOARD_WARMUP", "1") not in ("0", "false", "no"):
    import threading

    threading.Thread(target=_warm_up, name="encoder-warm-up", daemon=True).start()
