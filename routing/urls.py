"""Console URLs (server-rendered pages and their htmx partials)."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from experts.access import visible_slugs
from jobs.urls import console_urls as job_urls

from . import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("", views.OverviewView.as_view(), name="console-overview"),
    path("playground/", views.PlaygroundView.as_view(), name="console-playground"),
    path("playground/answer/", views.PlaygroundAnswerView.as_view(), name="console-playground-answer"),
    path("heatmap/", views.HeatmapView.as_view(), name="console-heatmap"),
    path("heatmap/data.json", views.HeatmapDataView.as_view(), name="console-heatmap-data"),
    path("review/", views.ReviewQueueView.as_view(), name="console-review"),
    path("experts/<slug:slug>/", views.ExpertView.as_view(), name="console-expert"),
    path("training/", views.TrainingListView.as_view(), name="console-training"),
    path("training/start/", views.TrainRouterView.as_view(), name="console-training-start"),
    path("training/compare/", views.TrainingCompareView.as_view(), name="console-training-compare"),
    path("training/<int:pk>/", views.TrainingRunView.as_view(), name="console-training-run"),
    path("training/<int:pk>/curves.json", views.TrainingCurvesView.as_view(), name="console-training-curves"),
    path("training/<int:pk>/activate/", views.TrainingRunActivateView.as_view(), name="console-training-activate"),
    path("jobs/", include(job_urls(visible_slugs, views.editable_slugs))),
    path("discovery/", include("labeling.urls")),
    path("knowledge/", include("knowledge.urls")),
]

urlpatterns += [path("keys/", include("routing.keys_urls"))]  # API keys (routing/keys_views.py)
