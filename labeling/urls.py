"""Console URLs for expert discovery (included by the console's URLconf at ``discovery/``).

``expert_urlpatterns`` holds labeling's actions on an expert's own pages, included at ``experts/``.
"""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.RunListView.as_view(), name="labeling-runs"),
    path("start/", views.StartClusteringView.as_view(), name="labeling-start"),
    path("departments/", views.NewDepartmentView.as_view(), name="labeling-new-department"),
    path("import/", views.ImportView.as_view(), name="labeling-import"),
    path("runs/<int:pk>/", views.RunView.as_view(), name="labeling-run"),
    path("runs/<int:pk>/unassigned/", views.UnassignedView.as_view(), name="labeling-unassigned"),
    path("runs/<int:pk>/merge/", views.MergeView.as_view(), name="labeling-merge"),
    path("runs/<int:pk>/move/", views.MoveView.as_view(), name="labeling-move"),
    path("runs/<int:pk>/detach-noise/", views.DetachNoiseView.as_view(), name="labeling-detach-noise"),
    path("runs/<int:pk>/attach-noise/", views.AttachNoiseView.as_view(), name="labeling-attach-noise"),
    path("runs/<int:pk>/undo/", views.UndoView.as_view(), name="labeling-undo"),
    path("runs/<int:pk>/finish/", views.FinishView.as_view(), name="labeling-finish"),
    path("runs/<int:pk>/discard/", views.DiscardRunView.as_view(), name="labeling-discard-run"),
    path("proposals/<int:pk>/queries/", views.ProposalQueriesView.as_view(), name="labeling-proposal-queries"),
    path("proposals/<int:pk>/rename/", views.RenameView.as_view(), name="labeling-rename"),
    path("proposals/<int:pk>/split/", views.SplitView.as_view(), name="labeling-split"),
    path("proposals/<int:pk>/discard/", views.DiscardView.as_view(), name="labeling-discard"),
    path("proposals/<int:pk>/promote/", views.PromoteView.as_view(), name="labeling-promote"),
]

expert_urlpatterns = [
    path("<slug:slug>/adapters/data/grounded/", views.GroundedExamplesView.as_view(), name="expert-training-data-grounded"),
]
