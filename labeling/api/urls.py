"""API URLs of the labeling app, included under ``/api/v1/`` (with the jobs API the upload points to)."""

from django.urls import include, path

from . import views

urlpatterns = [
    path("queries/import", views.QueryImportView.as_view(), name="api-queries-import"),
    path("", include("jobs.api.urls")),
]
