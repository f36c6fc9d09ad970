"""API URLs of the knowledge app, included under ``/api/v1/``."""

from django.urls import path

from . import views

urlpatterns = [
    path("experts/<slug:slug>/documents", views.DocumentListView.as_view(), name="api-expert-documents"),
    path("experts/<slug:slug>/documents/<int:pk>", views.DocumentDetailView.as_view(), name="api-expert-document"),
]
