"""Console URLs for experts' adapters, included at ``experts/``; all below ``<slug>/adapters/``.

The training data page's "Build grounded examples" action is the labeling app's
(``labeling.urls.expert_urlpatterns``, also included at ``experts/``).
"""

from django.urls import path

from . import views

urlpatterns = [
    path("<slug:slug>/adapters/", views.AdaptersView.as_view(), name="expert-adapters"),
    path("<slug:slug>/adapters/train/", views.TrainView.as_view(), name="expert-adapters-train"),
    path("<slug:slug>/adapters/prompt/", views.PromptView.as_view(), name="expert-adapters-prompt"),
    path("<slug:slug>/adapters/versions/<int:version>/activate/", views.ActivateView.as_view(), name="expert-version-activate"),
    path("<slug:slug>/adapters/data/", views.TrainingDataView.as_view(), name="expert-training-data"),
    path("<slug:slug>/adapters/data/add/", views.AddExampleView.as_view(), name="expert-training-data-add"),
    path("<slug:slug>/adapters/data/import/", views.ImportExamplesView.as_view(), name="expert-training-data-import"),
    path("<slug:slug>/adapters/data/<int:pk>/delete/", views.DeleteExampleView.as_view(), name="expert-training-data-delete"),
]
