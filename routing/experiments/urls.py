"""Console URLs of experiments (included from switchboard.urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("experiments/", views.ExperimentListView.as_view(), name="console-experiments"),
    path("experiments/<int:pk>/", views.ExperimentDetailView.as_view(), name="console-experiment"),
    path("experiments/<int:pk>/<slug:action>/", views.ExperimentActionView.as_view(), name="console-experiment-action"),
]
