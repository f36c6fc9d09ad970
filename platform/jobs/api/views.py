"""``GET /api/v1/jobs/<id>``: poll a background job; ``accepted``: the 202 answer of a request that enqueued one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from ..models import Job
from ..views import _as_is, _no_slugs, shown, visible_jobs
from .serializers import JobAcceptedSerializer, JobSerializer


class JobDetailView(generics.RetrieveAPIView):
    """A job's status, progress, result and error; poll it until ``status`` is succeeded or failed.

    Only jobs the caller may see (``jobs.views.visible_jobs``): another team's job is "not found";
    its text passes through ``redact_for`` (other teams' experts replaced, ``experts.redaction``).
    The expert rules are handed in by the URLconf (``as_view(visible_slugs=..., redact_for=...)``), as for the console.
    """

    queryset = Job.objects.all()
    serializer_class = JobSerializer
    visible_slugs = staticmethod(_no_slugs)
    redact_for = staticmethod(_as_is)

    def get_queryset(self):
        return visible_jobs(self.request.user, self.visible_slugs)

    def get_object(self) -> Job:
        try:
            job = super().get_object()
        except Http404 as exc:  # DRF's own NotFound, so the error body says not_found_error
            raise NotFound(f"No job {self.kwargs['pk']}.") from exc
        return shown(job, self.redact_for(self.request.user))


def accepted(job: Job) -> Response:
    """202 with the job's URLs (``Location``: its status URL) for the caller to poll."""
    job.refresh_from_db(fields=["status"])  # a worker (or eager mode) may have started it already
    body = {"job": job.pk, "status": job.status, "status_url": reverse("api-job", args=[job.pk]), "console_url": reverse("console-job", args=[job.pk])}
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["status_url"]})


def upload_schema(body: Any, refusals: dict[int, str]) -> Callable:
    """The schema of an upload answered 202 with its job (``accepted``): ``body`` as multipart, and each refusal's status and why."""
    return extend_schema(request={"multipart/form-data": body}, responses={
        202: JobAcceptedSerializer, **{code: OpenApiResponse(description=why) for code, why in refusals.items()}})
