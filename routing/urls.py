"""Console URLs (server-rendered pages and their htmx partials)."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.OverviewView.as_view(), name="console-overview"),
    path("playground/", views.PlaygroundView.as_view(), name="console-playground"),
    path("playground/answer/", views.PlaygroundAnswerView.as_view(), name="console-playground-answer"),
    path("heatmap/", views.HeatmapView.as_view(), name="console-heatmap"),
    path("training/", views.TrainingListView.as_view(), name="console-training"),
    path("training/<int:pk>/", views.TrainingRunView.as_view(), name="console-training-run"),
    path("training/<int:pk>/activate/", views.TrainingRunActivateView.as_view(), name="console-training-activate"),
    path("jobs/", include("jobs.urls")),
    path("discovery/", include("labeling.urls")),
    path("knowledge/", include("knowledge.urls")),
]
