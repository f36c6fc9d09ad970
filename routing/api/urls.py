"""API URLs of the routing app, included under ``/api/v1/``."""

from django.urls import path

from . import views

urlpatterns = [
    path("router/train", views.TrainView.as_view(), name="api-router-train"),
    path("router/versions", views.VersionListView.as_view(), name="api-router-versions"),
    path("router/versions/<int:version>", views.VersionDetailView.as_view(), name="api-router-version"),
    path("router/versions/<int:version>/activate", views.ActivateView.as_view(), name="api-router-activate"),
    path("experiments", views.ExperimentListView.as_view(), name="api-experiments"),
    path("experiments/<int:pk>", views.ExperimentDetailView.as_view(), name="api-experiment"),
    path("experiments/<int:pk>/<slug:action>", views.ExperimentActionView.as_view(), name="api-experiment-action"),
]
