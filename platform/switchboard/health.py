"""Liveness and readiness probes."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

logger = logging.getLogger(__name__)


def healthz(request):
    """The process is up."""
    return JsonResponse({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_broker() -> None:
    from switchboard.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def _check_vector_store() -> None:
    from knowledge.stores import get_store

    get_store().health()


def _check_embedding_model() -> None:
    from encoders import resolve_backend, resolve_model_path

    resolve_model_path(settings.EMBEDDING_MODEL)
    if resolve_backend().startswith("onnx"):  # a bad EMBEDDING_BACKEND raises too
        import onnxruntime  # noqa: F401  (the ONNX backends need it installed)


CHECKS = {
    "database": _check_database,
    "broker": _check_broker,
    "vector_store": _check_vector_store,
    "embedding_model": _check_embedding_model,
}


def readyz(request):
    """Every dependency reachable → 200; otherwise 503 naming the failing parts."""
    results, failing = {}, []
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # any failure means not ready; the message says which part and why
            logger.warning("readiness check %s failed: %s", name, exc.__class__.__name__)
            results[name] = f"error: {exc.__class__.__name__}: {str(exc)[:200]}"
            failing.append(name)
    body = {"status": "ok" if not failing else "unavailable", "checks": results}
    if failing:
        body["failing"] = failing
    return JsonResponse(body, status=200 if not failing else 503)
