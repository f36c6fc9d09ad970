"""Console URLs of router training (included at the console's root by switchboard/urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("training/", views.TrainingListView.as_view(), name="console-training"),
    path("training/start/", views.TrainRouterView.as_view(), name="console-training-start"),
    path("training/compare/", views.TrainingCompareView.as_view(), name="console-training-compare"),
    path("training/<int:pk>/", views.TrainingRunView.as_view(), name="console-training-run"),
    path("training/<int:pk>/curves.json", views.TrainingCurvesView.as_view(), name="console-training-curves"),
    path("training/<int:pk>/activate/", views.TrainingRunActivateView.as_view(), name="console-training-activate"),
]
