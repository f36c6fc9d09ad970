"""No personal data in logs: a logging filter that masks question texts, e-mail addresses, phone numbers and keys.

Question texts are known per request: ``PersonalDataMiddleware`` registers the strings of a JSON
request body (chat messages, questions) with ``sensitive()`` for the request's duration, and the
filter replaces any of them found in a log line, its arguments, or its ``extra`` fields. Fields
named like free text (``question``, ``content``, ``messages``...) are masked whatever they hold.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
from collections.abc import Iterable, Iterator

MIN_SENSITIVE_CHARS = 6
SENSITIVE_FIELDS = frozenset({"question", "questions", "content", "messages", "prompt", "query", "text", "answer", "input"})
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PHONE = re.compile(r"(?<![\w.])\+?\d[\d\s().-]{8,}\d(?![\w.])")
_KEY = re.compile(r"\b(sk|sb|key)[-_][A-Za-z0-9_-]{16,}\b")
_current: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("sensitive_texts", default=())
_STANDARD = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime"}


@contextlib.contextmanager
def sensitive(texts: Iterable[str]) -> Iterator[None]:
    """Mask these strings (each at least ``MIN_SENSITIVE_CHARS`` long) in every log line written inside the block."""
    extra = tuple(t for t in texts if isinstance(t, str) and len(t.strip()) >= MIN_SENSITIVE_CHARS)
    token = _current.set(_current.get() + extra)
    try:
        yield
    finally:
        _current.reset(token)


def mask(text: str) -> str:
    """``text`` with the current request's sensitive strings, e-mail addresses, phone numbers and keys replaced."""
    for secret in sorted(_current.get(), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, f"[redacted {len(secret)} chars]")
    text = _EMAIL.sub("[email]", text)
    text = _KEY.sub("[key]", text)
    return _PHONE.sub("[phone]", text)


class PersonalDataFilter(logging.Filter):
    """Rewrites each record in place (message, arguments, extra fields, exception text); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the formatter to report
            return True
        record.msg, record.args = mask(message), None
        for key, value in list(vars(record).items()):
            if key in _STANDARD:
                continue
            record.__dict__[key] = "[redacted]" if key.lower() in SENSITIVE_FIELDS else mask(value) if isinstance(value, str) else value
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask(record.exc_text)
        return True
