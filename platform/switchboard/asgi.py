"""ASGI entry point (served by uvicorn; needed for streaming responses)."""

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
# A serving process encodes in a child process of its own (sbcommon.encoders.ProcessEncoder); ENCODER_PROCESS=0 keeps it in.
os.environ.setdefault("ENCODER_PROCESS", "1")


class RequestThreads:
    """Single-thread executors kept between requests: each request borrows one for all its sync work.

    Django's handler opened a ``ThreadSensitiveContext`` per request, which started a thread for it
    and joined it at the end: ~9% of the serving process's time went to starting and joining threads
    under load, and every request opened a new database connection (connections are per thread).
    A borrowed executor keeps its thread, and with ``DB_CONN_MAX_AGE`` its connection, across
    requests, as a WSGI server's worker threads do. Executors come back most recent first (hot
    caches); beyond ``keep`` idle ones, the extras are shut down.
    """

    def __init__(self, keep: int = 64):
        self.keep = keep
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()
        self.started = 0

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self.started += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)


class OneThreadASGIHandler(ASGIHandler):
    """Django's ASGI handler, with the middleware chain and the view run together in one thread per request.

    Every view here and most of the middleware (Django's own, WhiteNoise, ours) are synchronous.
    Django's handler starts an async chain that ends in an async inner handler, so a request went
    to a thread for the sync middleware, back to the event loop for the inner handler, and to the
    thread again for the view; under load each crossing waits for the GIL. Here the chain is built
    synchronous (as under WSGI) and the whole of it runs in the request's thread: one round trip.
    Requests are still read and responses (streams included) still sent by the event loop. The
    thread is borrowed from ``RequestThreads`` instead of started for the request.
    """

    def __init__(self):
        super().__init__()
        from django.conf import settings

        self.threads = RequestThreads(keep=settings.REQUEST_THREADS_KEEP)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            # A view still running after its client went away keeps the thread busy: the next
            # request on it waits its turn, which is correct, only slower for that one.
            self.threads.give(executor)

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self._respond, thread_sensitive=True)(request)

    def _respond(self, request):
        """The whole synchronous part of a request, in its thread: ``request_started``, the chain, and the close.

        Django's handler crosses to the request's thread three times: to send ``request_started`` (its
        receivers are synchronous), for the view, and to close the response (``request_finished``).
        Each crossing is event-loop work and a wait for the GIL (``bench handler``: 1.12 -> 0.71 ms
        of CPU a request). A complete (non-streaming) response is closed here, before its bytes are
        sent: its content is already rendered. A streaming one is closed after its last chunk, as
        Django does.
        """
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        if not response.streaming:
            response.close()
            response._closed_in_thread = True
        return response

    async def handle(self, scope, receive, send):
        """Django 5.2's ``ASGIHandler.handle`` (pinned, ``Django>=5.2,<5.3``) with ``request_started`` and a
        complete response's close moved into the request's one thread crossing (``_respond``)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            await signals.request_started.asend(sender=self.__class__, scope=scope)
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request(request, send):
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the response was being sent
            return response

        # As Django does: a disconnect while the response is computed or sent cancels the sending
        # (a stream stops), though a view already running in its thread runs to its end.
        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)), asyncio.create_task(process_request(request, send))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if not getattr(response, "_closed_in_thread", False):
                await sync_to_async(response.close, thread_sensitive=True)()
        body_file.close()


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

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            from serving import events

            try:
                await asyncio.to_thread(events.shutdown)  # the database is used from a thread, never the event loop
            except Exception as exc:
                await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
            else:
                await send({"type": "lifespan.shutdown.complete"})
            return


def _warm_up() -> None:
    """Load the sentence encoder before the first request instead of during it (~3 s on a laptop), and
    the active router with the tables it reads (``serving.route.warm_up``), then take what is loaded by
    now out of the garbage collector's walks (``sbcommon.gcfreeze``)."""
    try:
        from sbcommon.encoders import get_encoder
        from serving.route import warm_up

        get_encoder().encode(["warm-up"])
        warm_up()
        from experts.generation.registry import warm_up_hottest  # GENERATOR=transformers: load the busiest adapters
        from routing.selectors import traffic_by_expert

        warm_up_hottest(traffic_by_expert)
    except Exception:  # a broken model shows up in /readyz; warming up is best effort
        import logging

        logging.getLogger(__name__).exception("encoder warm-up failed")
    freeze_startup_objects()


from sbcommon.gcfreeze import freeze_after_requests, freeze_startup_objects  # noqa: E402  (after django.setup)

freeze_after_requests()  # and again once the first requests have loaded the router and the indexes

if os.environ.get("SWITCHBOARD_WARMUP", "1") not in ("0", "false", "no"):
    threading.Thread(target=_warm_up, name="encoder-warm-up", daemon=True).start()
else:
    freeze_startup_objects()
