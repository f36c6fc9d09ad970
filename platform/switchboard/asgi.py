"""ASGI entry point (served by uvicorn; needed for streaming responses)."""

import os

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
# A serving process encodes in a child process of its own (sbcommon.encoders.ProcessEncoder); ENCODER_PROCESS=0 keeps it in.
os.environ.setdefault("ENCODER_PROCESS", "1")


class OneThreadASGIHandler(ASGIHandler):
    """Django's ASGI handler, with the middleware chain and the view run together in one thread per request.

    Every view here and most of the middleware (Django's own, WhiteNoise, ours) are synchronous.
    Django's handler starts an async chain that ends in an async inner handler, so a request went
    to a thread for the sync middleware, back to the event loop for the inner handler, and to the
    thread again for the view; under load each crossing waits for the GIL. Here the chain is built
    synchronous (as under WSGI) and the whole of it runs in the request's thread: one round trip.
    Requests are still read and responses (streams included) still sent by the event loop.
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


django.setup(set_prefix=False)
django_application = OneThreadASGIHandler()


async def application(scope, receive, send):
    """Django for HTTP; the ASGI lifespan here (Django does not speak it): at shutdown, write the buffered routing events.

    uvicorn (``--lifespan on``) sends ``lifespan.shutdown`` after the last request finished, then
    re-raises the SIGTERM it handled, which ends the process without running at-exit hooks: without
    this the events of the last half second (``EVENTS_FLUSH_MS``) were lost.
    """
    if scope["type"] != "lifespan":
        return await django_application(scope, receive, send)
    import asyncio

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            from routing import events

            try:
                await asyncio.to_thread(events.shutdown)  # the database is used from a thread, never the event loop
            except Exception as exc:
                await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
            else:
                await send({"type": "lifespan.shutdown.complete"})
            return


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
