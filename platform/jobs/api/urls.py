"""API URLs for jobs, included under ``/api/v1/``."""

from django.urls import path

from . import views

urlpatterns = [
    path("jobs/<int:pk>", views.JobDetailView.as_view(), name="api-job"),
]
