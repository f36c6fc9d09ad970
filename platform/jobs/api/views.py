"""``GET /api/v1/jobs/<id>``: poll a background job."""

from __future__ import annotations

from django.http import Http404
from rest_framework import generics
from rest_framework.exceptions import NotFound

from ..models import Job
from .serializers import JobSerializer


class JobDetailView(generics.RetrieveAPIView):
    """A job's status, progress, result and error; poll it until ``status`` is succeeded or failed."""

    queryset = Job.objects.all()
    serializer_class = JobSerializer

    def get_object(self) -> Job:
        try:
            return super().get_object()
        except Http404 as exc:  # DRF's own NotFound, so the error body says not_found_error
            raise NotFound(f"No job {self.kwargs['pk']}.") from exc
