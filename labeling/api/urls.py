"""API URLs of the labeling app, included under ``/api/v1/`` (with the jobs API the upload points to)."""

from django.urls import path

from experts.access import visible_slugs
from experts.redaction import redactor_for
from jobs.api.views import JobDetailView

from . import views

urlpatterns = [
    # The jobs API with the team rules (jobs sits below experts, so they are handed in here).
    path("jobs/<int:pk>", JobDetailView.as_view(visible_slugs=visible_slugs, redact_for=redactor_for), name="api-job"),
    path("queries/import", views.QueryImportView.as_view(), name="api-queries-import"),
    path("experts", views.ExpertCreateView.as_view(), name="api-experts"),
    path("discovery/runs", views.RunListView.as_view(), name="api-discovery-runs"),
    path("discovery/runs/<int:pk>", views.RunDetailView.as_view(), name="api-discovery-run"),
    path("discovery/runs/<int:pk>/unassigned", views.UnassignedView.as_view(), name="api-discovery-unassigned"),
    path("discovery/runs/<int:pk>/merge", views.MergeView.as_view(), name="api-discovery-merge"),
    path("discovery/runs/<int:pk>/move", views.MoveView.as_view(), name="api-discovery-move"),
    path("discovery/runs/<int:pk>/detach-noise", views.DetachNoiseView.as_view(), name="api-discovery-detach-noise"),
    path("discovery/runs/<int:pk>/attach-noise", views.AttachNoiseView.as_view(), name="api-discovery-attach-noise"),
    path("discovery/runs/<int:pk>/undo", views.UndoView.as_view(), name="api-discovery-undo"),
    path("discovery/runs/<int:pk>/finish", views.FinishView.as_view(), name="api-discovery-finish"),
    path("discovery/runs/<int:pk>/discard", views.DiscardRunView.as_view(), name="api-discovery-discard-run"),
    path("discovery/proposals/<int:pk>", views.ProposalDetailView.as_view(), name="api-discovery-proposal"),
    path("discovery/proposals/<int:pk>/queries", views.ProposalQueriesView.as_view(), name="api-discovery-proposal-queries"),
    path("discovery/proposals/<int:pk>/rename", views.RenameView.as_view(), name="api-discovery-rename"),
    path("discovery/proposals/<int:pk>/split", views.SplitView.as_view(), name="api-discovery-split"),
    path("discovery/proposals/<int:pk>/discard", views.DiscardView.as_view(), name="api-discovery-discard"),
    path("discovery/proposals/<int:pk>/promote", views.PromoteView.as_view(), name="api-discovery-promote"),
]
