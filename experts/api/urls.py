"""API URLs of the experts app, included under ``/api/v1/``."""

from django.urls import path

from . import views

urlpatterns = [
    path("experts/<slug:slug>/adapter", views.AdapterStatusView.as_view(), name="api-expert-adapter"),
    path("experts/<slug:slug>/adapter/register", views.AdapterRegisterView.as_view(), name="api-expert-adapter-register"),
]
