"""ASGI entry point (served by uvicorn; needed for streaming responses)."""

import asyncio
import contextlib
import io
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.urls import Resolver404, resolve, set_script_prefix

from sbcommon.uploads import MULTIPART_SLACK

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchboard.settings")
# A serving process encodes in a child process of its own (encoders.process.ProcessEncoder); ENCODER_PROCESS=0 keeps it in.
os.environ.setdefault("ENCODER_PROCESS", "1")

logger = logging.getLogger(__name__)


def _upload_limits() -> dict[str, Callable[[], int]]:
    """The routes that take files, by URL name, each with the function that gives its largest upload (from its settings)."""
    from experts.forms import MAX_IMPORT_BYTES
    from knowledge.ingest import max_upload_bytes
    from labeling.services import max_import_bytes

    return {
        "labeling-import": max_import_bytes, "api-queries-import": max_import_bytes,
        "knowledge-upload": max_upload_bytes, "api-expert-documents": max_upload_bytes,
        "expert-training-data-import": lambda: MAX_IMPORT_BYTES,
    }


class BodyTooLarge(Exception):
    """A request body refused by ``BodyLimit`` before it was read further."""

    def __init__(self, limit: int, declared: int | None):
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit
        self.declared = declared


class BodyLimit:
    """The largest body one request may send, checked while the body arrives, before anything is stored.

    Django's handler spools the whole body before any view runs. Every route accepts
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, the routes that take files (``_upload_limits``) their own upload
    limit, both plus ``MULTIPART_SLACK``; the views' finer checks still run. The route is looked up only
    for a body past the first limit; ``DATA_UPLOAD_MAX_MEMORY_SIZE = None`` lifts it, as in Django.
    """

    def __init__(self, scope: dict):
        self.scope = scope
        self.limit: int | None = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        self.declared = declared_length(scope)
        self._route_checked = False

    async def check(self, size: int) -> None:
        """Raise ``BodyTooLarge`` when ``size`` bytes of body are over this request's limit.

        The first time a body passes the default limit, the route is looked up: a route that takes
        files raises the limit to its upload limit, for a caller who is signed in or sends a valid
        API key (``caller_may_upload``). Anyone else's large body is refused before it is stored,
        instead of being spooled to disk only for the view to answer 401 or 403.
        """
        if self.limit is None or size <= self.limit + MULTIPART_SLACK:
            return
        if not self._route_checked:
            self._route_checked = True
            upload = self._route_upload_limit()
            if upload is not None and upload > self.limit and await sync_to_async(caller_may_upload, thread_sensitive=True)(self.scope):
                self.limit = upload
        if size > self.limit + MULTIPART_SLACK:
            raise BodyTooLarge(self.limit, self.declared)

    def _route_upload_limit(self) -> int | None:
        script_name = get_script_prefix(self.scope)
        path = self.scope["path"]
        try:  # as Django's ASGIRequest finds path_info
            match = resolve(path.removeprefix(script_name) if script_name else path)
        except Resolver404:
            return None
        limit = _upload_limits().get(match.url_name or "")
        return limit() if limit is not None else None


def caller_may_upload(scope: dict) -> bool:
    """Whether the request comes from a signed-in, active user (session cookie or HTTP Basic) or with a valid API key.

    Read from the headers alone, before the body, by the views' own means (Django's session and
    ``get_user``, DRF's Basic authentication, the API keys' ``authenticate``): the upload views check
    the same caller again (and what they may upload where) once the body is in.
    """
    from django.contrib.auth import get_user
    from django.contrib.sessions.middleware import SessionMiddleware
    from rest_framework.authentication import BasicAuthentication
    from rest_framework.exceptions import AuthenticationFailed

    from clients.services import InvalidApiKey
    from clients.services import authenticate as authenticate_key

    request = ASGIRequest({**scope, "query_string": b""}, io.BytesIO())  # the headers only: a garbled query string is Django's 400
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    try:
        if scheme.lower() == "bearer":
            return authenticate_key(credentials.strip()) is not None
        if scheme.lower() == "basic":
            return BasicAuthentication().authenticate(request) is not None
    except (InvalidApiKey, AuthenticationFailed):
        return False
    SessionMiddleware(lambda request: None).process_request(request)
    return get_user(request).is_active


def declared_length(scope: dict) -> int | None:
    """The request's Content-Length, or None when it has none (a chunked body) or a garbled one (counted as it arrives)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
            return length if length >= 0 else None
    return None


async def refuse_body(exc: BodyTooLarge, scope: dict, send) -> None:
    """Answer 413 in the API's error shape with OpenAI's four keys, as the chat endpoint's own 413, and close the
    connection: the rest of the body is never read."""
    logger.warning("request.body_too_large", extra={"path": scope["path"], "method": scope.get("method"), "declared": exc.declared,
                                                    "limit": exc.limit})
    message = f"Request body is too large: the limit is {exc.limit} bytes."
    content = json.dumps({"error": {"type": "request_too_large", "message": message, "param": None, "code": None}}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
        (b"x-content-type-options", b"nosniff"), (b"connection", b"close"),
    ]})
    await send({"type": "http.response.body", "body": content})


class RequestThreads:
    """Single-thread executors kept between requests: each request borrows one for all its sync work.

    Django starts and joins a thread per request, each with a new database connection; a borrowed
    executor keeps its thread and its connection, as a WSGI server's worker threads do
    (docs/ARCHITECTURE.md, "The serving process"). Executors come back most recent first (hot
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

    Every view here and most of the middleware are synchronous, so the chain is built synchronous (as
    under WSGI) and runs whole in the request's thread, borrowed from ``RequestThreads``: one crossing
    where Django's handler makes three (docs/ARCHITECTURE.md, "The serving process"). Requests are
    still read and responses (streams included) still sent by the event loop.
    """

    def __init__(self):
        super().__init__()
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

        A complete response is closed here, before its bytes are sent; a streaming one after its last chunk.
        """
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        if not response.streaming:
            response.close()
            response._closed_in_thread = True
        return response

    async def read_body(self, receive, limit: BodyLimit):
        """Django's ``read_body``, stopping at ``limit``: a declared length over it before any ``receive``, else as soon as
        the chunks add up to more (a chunked body, or a Content-Length that lies); what is spooled never exceeds it."""
        if limit.declared is not None:
            await limit.check(limit.declared)
        body_file = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise RequestAborted()  # the client went away early
                if "body" in message:
                    size += len(message["body"])
                    await limit.check(size)
                    body_file.write(message["body"])
                if not message.get("more_body", False):
                    break
        except BaseException:
            body_file.close()
            raise
        body_file.seek(0)
        return body_file

    async def handle(self, scope, receive, send):
        """Django 5.2's ``ASGIHandler.handle`` (pinned, ``Django>=5.2,<5.3``) with ``request_started`` and a
        complete response's close moved into the request's one thread crossing (``_respond``), and the
        body limited as it is read (``BodyLimit``: a body over it is answered 413, never stored)."""
        try:
            body_file = await self.read_body(receive, BodyLimit(scope))
        except RequestAborted:
            return
        except BodyTooLarge as exc:
            await refuse_body(exc, scope, send)
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
            with contextlib.suppress(asyncio.CancelledError):  # the client went away while the response was being sent
                await self.send_response(response, send)
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
                with contextlib.suppress(asyncio.CancelledError):
                    await task
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


# With no router yet (run_platform starts the web server while the demo's router trains), the warm-up
# looks for one every ROUTER_WAIT_S seconds, for at most ROUTER_WAIT_FOR_S, and loads it once it is there.
ROUTER_WAIT_S = 1.0
ROUTER_WAIT_FOR_S = 600.0


def _warm_up() -> None:
    """Load the sentence encoder before the first request instead of during it (~3 s on a laptop), and
    the active router with the tables it reads (``serving.route.warm_up``), then take what is loaded by
    now out of the garbage collector's walks (``sbcommon.gcfreeze``). With no router yet, keep looking
    for one afterwards (``_warm_up_router_later``)."""
    routed = True
    try:
        from encoders import get_encoder
        from serving.route import warm_up

        get_encoder().encode(["warm-up"])
        routed = warm_up()
        from experts.generation.registry import warm_up_hottest  # GENERATOR=transformers: load the busiest adapters
        from routing.selectors import traffic_by_expert

        warm_up_hottest(traffic_by_expert)
    except Exception:  # a broken model shows up in /readyz; warming up is best effort
        logger.exception("encoder warm-up failed")
    freeze_startup_objects()
    if not routed:
        _warm_up_router_later()


def _warm_up_router_later() -> None:
    """Load the router (``serving.route.warm_up``) as soon as one is active, instead of during its first question."""
    from serving.route import warm_up

    deadline = time.monotonic() + ROUTER_WAIT_FOR_S
    try:
        while time.monotonic() < deadline:
            time.sleep(ROUTER_WAIT_S)
            if warm_up():
                return
    except Exception:  # best effort, as above: the first question loads it then
        logger.exception("router warm-up failed")


from sbcommon.gcfreeze import freeze_after_requests, freeze_startup_objects  # noqa: E402  (after django.setup)

freeze_after_requests()  # and again once the first requests have loaded the router and the indexes

if os.environ.get("SWITCHBOARD_WARMUP", "1") not in ("0", "false", "no"):
    threading.Thread(target=_warm_up, name="encoder-warm-up", daemon=True).start()
else:
    freeze_startup_objects()
