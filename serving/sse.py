"""A server-sent-events body that streams under WSGI and ASGI alike and always closes what produced it.

Used by the chat API (``serving.api.views``) and the console's streamed playground.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse

_END = object()


class EventStream:
    """The body of one streamed response; ``close()`` (Django calls it when the response is closed) runs ``on_close``.

    Closing is idempotent as long as ``on_close`` is: it closes the event generator (and through it
    whatever it streams from) and then calls ``on_close``, even when no event was ever pulled (a
    client gone before the first one).
    """

    def __init__(self, events: Iterator[bytes], on_close: Callable[[], None]):
        self.events = events
        self.on_close = on_close

    def close(self) -> None:
        close = getattr(self.events, "close", None)
        if close is not None:
            close()
        self.on_close()


class SyncEventStream(EventStream):
    """For WSGI (and Django's test client): the server pulls events and calls ``close()`` when done or when the client left."""

    def __iter__(self) -> Iterator[bytes]:
        return self.events


class AsyncEventStream(EventStream):
    """For ASGI (uvicorn): each event is computed in the request's sync thread (database access) and sent as it comes.

    Django would buffer a sync iterator whole under ASGI, which defeats streaming. When the client
    disconnects, Django cancels the response task: ``finally`` then closes the stream in that same
    thread (or, if the task was cancelled while sending, asyncio's finaliser runs the same
    ``finally`` as soon as the generator is dropped).
    """

    async def __aiter__(self) -> AsyncIterator[bytes]:
        step = sync_to_async(next, thread_sensitive=True)
        try:
            while True:
                part = await step(self.events, _END)
                if part is _END:
                    return
                yield part
        finally:
            await sync_to_async(self.close, thread_sensitive=True)()


def event_stream_response(request, events: Iterator[bytes], on_close: Callable[[], None]) -> StreamingHttpResponse:
    """A ``text/event-stream`` response of ``events``, async under ASGI, that proxies pass through unbuffered."""
    asgi = isinstance(getattr(request, "_request", request), ASGIRequest)
    body = AsyncEventStream(events, on_close) if asgi else SyncEventStream(events, on_close)
    response = StreamingHttpResponse(body, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass chunks through as they come
    return response
