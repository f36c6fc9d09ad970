"""switchboard.asgi: a request body is limited while it is read, so nothing over the limit is stored (not even in a temporary file)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.http import HttpResponse
from django.urls import get_resolver

from sbcommon.uploads import MULTIPART_SLACK
from switchboard.asgi import OneThreadASGIHandler, _upload_limits, django_application

MiB = 1024 * 1024
GiB = 1024 * MiB


class Client:
    """An ASGI client sending ``size`` zero bytes in ``chunk``-byte messages, made one at a time as the app asks for them.

    ``pulled`` counts the body bytes the app took; ``on_receive`` runs before each message (to measure the disk
    while the body arrives). Once the body is sent the client waits, as a real one does, until the app is done.
    """

    def __init__(self, size: int, chunk: int = MiB, on_receive=None):
        self.size, self.chunk, self.on_receive = size, chunk, on_receive
        self.pulled = 0
        self.receives = 0

    async def receive(self) -> dict:
        if self.on_receive is not None:
            self.on_receive()
        if self.pulled >= self.size and self.receives:
            await asyncio.Future()  # waits for a disconnect that never comes; cancelled when the response is sent
        self.receives += 1
        n = min(self.chunk, self.size - self.pulled)
        self.pulled += n
        return {"type": "http.request", "body": bytes(n), "more_body": self.pulled < self.size}


def _scope(path: str, length: int | None, content_type: bytes = b"application/json", extra: tuple[tuple[bytes, bytes], ...] = ()) -> dict:
    headers = [(b"host", b"testserver"), (b"content-type", content_type), *extra]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
            "headers": headers}


def _send(scope: dict, client: Client, handler=django_application) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async_to_sync(handler)(scope, client.receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def _default_limit(settings) -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE + MULTIPART_SLACK


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(settings):
    client = Client(GiB)
    status, headers, body = _send(_scope("/v1/chat/completions", GiB), client)
    assert status == 413
    assert client.receives == 0
    assert headers[b"connection"] == b"close"  # the body the client is still sending is never read
    assert json.loads(body) == {"error": {
        "type": "request_too_large", "message": f"Request body is too large: the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
        "param": None, "code": None}}


def test_a_chunked_body_stops_being_read_at_the_limit(settings):
    client = Client(GiB)
    status, _, body = _send(_scope("/v1/chat/completions", None), client)
    assert status == 413
    assert json.loads(body)["error"]["type"] == "request_too_large"
    assert _default_limit(settings) < client.pulled <= _default_limit(settings) + MiB


def test_a_body_longer_than_its_content_length_stops_at_the_limit(settings):
    client = Client(GiB)
    status, _, _ = _send(_scope("/v1/chat/completions", 100), client)
    assert status == 413
    assert client.pulled <= _default_limit(settings) + MiB


class EchoHandler(OneThreadASGIHandler):
    """The handler with a view that answers the body it was given, whoever asks."""

    def _respond(self, request):
        return HttpResponse(request.read(), content_type="application/octet-stream")  # read(): past Django's own check of request.body


def test_a_body_within_the_limit_reaches_the_view_whole(settings):
    size = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + MULTIPART_SLACK  # the largest body any route takes, in 64 KiB messages
    for length in (size, None):
        client = Client(size, chunk=64 * 1024)
        status, _, body = _send(_scope("/v1/chat/completions", length), client, EchoHandler())
        assert status == 200
        assert body == bytes(size)


def _signed_in() -> tuple[bytes, bytes]:
    """The cookie header of a signed-in, active user's session."""
    from django.contrib.auth.models import User
    from django.test import Client as DjangoClient

    browser = DjangoClient()
    browser.force_login(User.objects.create_user("uploader", password="pw-uploader-123456"))
    name = django_settings.SESSION_COOKIE_NAME
    return b"cookie", f"{name}={browser.cookies[name].value}".encode()


def _basic(password: str = "pw-uploader-123456") -> tuple[bytes, bytes]:
    """The Authorization header of HTTP Basic as the user ``_signed_in`` made (``password``: the right one by default)."""
    import base64

    return b"authorization", b"Basic " + base64.b64encode(f"uploader:{password}".encode())


def _bearer() -> tuple[bytes, bytes]:
    from tests.factories import make_key

    return b"authorization", f"Bearer {make_key('uploads').secret}".encode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("credentials", ["session", "basic", "key"])
def test_an_upload_route_reads_a_signed_in_callers_body_over_the_default_limit(settings, credentials):
    settings.QUERY_IMPORT_MAX_BYTES = 8 * MiB
    session = _signed_in()
    header = {"session": session, "basic": _basic(), "key": _bearer()}[credentials]
    client = Client(4 * MiB)
    _send(_scope("/api/v1/queries/import", None, b"multipart/form-data; boundary=x", (header,)), client)
    assert client.pulled == 4 * MiB  # the body went through whole, to the view's own checks


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_upload_with_a_garbled_query_string_is_read_and_answered_400(settings):
    settings.QUERY_IMPORT_MAX_BYTES = 8 * MiB
    client = Client(4 * MiB)
    scope = {**_scope("/api/v1/queries/import", None, b"multipart/form-data; boundary=x", (_signed_in(),)), "query_string": b"team=\xff"}
    status, _, _ = _send(scope, client)
    assert client.pulled == 4 * MiB  # the caller may upload: the query string is not read before the body
    assert status == 400  # Django's answer to a query string that is not UTF-8


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("credentials", ["none", "unknown key", "forged session", "wrong password", "garbled basic"])
def test_an_upload_route_refuses_a_strangers_body_at_the_default_limit(settings, credentials):
    settings.QUERY_IMPORT_MAX_BYTES = 8 * MiB
    _signed_in()
    extra = {"none": (), "unknown key": ((b"authorization", b"Bearer sk-sb-" + b"x" * 43),),
             "forged session": ((b"cookie", f"{settings.SESSION_COOKIE_NAME}=not-a-session".encode()),),
             "wrong password": (_basic("not-the-password"),), "garbled basic": ((b"authorization", b"Basic !!!"),)}[credentials]
    client = Client(GiB)
    status, _, _ = _send(_scope("/api/v1/queries/import", None, b"multipart/form-data; boundary=x", extra), client)
    assert status == 413
    assert client.pulled <= _default_limit(settings) + MiB


@pytest.mark.django_db(transaction=True)
def test_an_upload_route_refuses_a_declared_length_over_its_own_limit(settings):
    settings.QUERY_IMPORT_MAX_BYTES = 8 * MiB
    client = Client(GiB)
    scope = _scope("/api/v1/queries/import", 8 * MiB + MULTIPART_SLACK + 1, b"multipart/form-data; boundary=x", (_signed_in(),))
    status, _, body = _send(scope, client)
    assert status == 413
    assert client.receives == 0
    assert json.loads(body)["error"]["message"] == f"Request body is too large: the limit is {8 * MiB} bytes."


def test_every_upload_route_in_the_limits_exists():
    names = get_resolver().reverse_dict
    assert [name for name in _upload_limits() if name not in names] == []
    assert all(limit() > 0 for limit in _upload_limits().values())


def _bytes_on_disk(folder: Path) -> int:
    """Bytes in the files under ``folder``, this process's open unnamed ones included.

    A spooled body rolls over to ``tempfile.TemporaryFile``, which has no name in its folder (``O_TMPFILE``,
    or unlinked at once): it shows only among the open files, as ``<folder>/... (deleted)``.
    """
    named = 0
    for path in folder.rglob("*"):
        try:
            named += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:
            pass
    unnamed = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
            if target.startswith(f"{folder}/") and target.endswith(" (deleted)"):
                unnamed += os.stat(fd).st_size
        except OSError:
            pass
    return named + unnamed


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open temporary files through /proc")
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/v1/queries/import"])
@pytest.mark.parametrize("declared", [GiB, None], ids=["content-length", "chunked"])
def test_a_one_gib_post_writes_nothing_to_disk(declared, path, settings, tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    data = Path(settings.VAR_DIR)  # the test run's own data folder (settings_test: a fresh temporary one)
    for thread in threading.enumerate():
        if thread.name == "encoder-warm-up":  # started by importing switchboard.asgi; it writes the encoder's export under VAR_DIR
            thread.join()
    before = {"temp": _bytes_on_disk(temp), "data": _bytes_on_disk(data)}
    peak = dict(before)

    def measure():
        for name, folder in (("temp", temp), ("data", data)):
            peak[name] = max(peak[name], _bytes_on_disk(folder))

    client = Client(GiB, on_receive=measure)
    status, _, _ = _send(_scope(path, declared, b"multipart/form-data; boundary=x"), client)  # a stranger's
    measure()
    assert peak == before  # while the body arrived
    assert {"temp": _bytes_on_disk(temp), "data": _bytes_on_disk(data)} == before
    assert client.pulled <= _default_limit(settings) + MiB
    assert status == 413
