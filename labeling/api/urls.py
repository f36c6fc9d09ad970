"""API URLs of the labeling app, included under ``/api/v1/`` (with the jobs API the upload points to)."""

from django.urls import include, path

from experts.access import visible_slugs
from experts.redaction import redactor_for
from jobs.api.views import JobDetailView

from . import views

urlpatterns = [
    path("queries/import", views.QueryImportView.as_view(), name="api-queries-import"),
    path("", include("jobs.api.urls")),
]
# The jobs API with the team rules (jobs sits below experts, so they are handed in here); resolved first.
urlpatterns.insert(0, path("jobs/<int:pk>", JobDetailView.as_view(visible_slugs=visible_slugs, redact_for=redactor_for), name="api-job"))
