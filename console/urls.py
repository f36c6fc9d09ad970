"""Console URLs of the pages that span apps (included at the console's root by switchboard/urls.py)."""

from django.urls import include, path

from experts.access import editable_slugs, visible_slugs
from experts.redaction import redactor_for
from jobs.urls import console_urls as job_urls

from . import audit, expert, heatmap, job_links, keys, overview, playground, review_queue, teams, traces

urlpatterns = [
    path("", overview.OverviewView.as_view(), name="console-overview"),
    path("playground/", playground.PlaygroundView.as_view(), name="console-playground"),
    path("playground/answer/", playground.PlaygroundAnswerView.as_view(), name="console-playground-answer"),
    path("playground/stream/", playground.PlaygroundStreamView.as_view(), name="console-playground-stream"),
    path("heatmap/", heatmap.HeatmapView.as_view(), name="console-heatmap"),
    path("heatmap/data.json", heatmap.HeatmapDataView.as_view(), name="console-heatmap-data"),
    path("review/", review_queue.ReviewQueueView.as_view(), name="console-review"),
    path("traces/", traces.TraceListView.as_view(), name="console-traces"),
    path("traces/<str:request_id>/", traces.TraceDetailView.as_view(), name="console-trace"),
    path("traces/<str:request_id>/feedback/", traces.TraceFeedbackView.as_view(), name="console-trace-feedback"),
    # The experts are listed on the overview; /experts/ (an expert page's URL cut short) leads there.
    path("experts/", overview.ExpertsView.as_view(), name="console-experts"),
    path("experts/<slug:slug>/", expert.ExpertView.as_view(), name="console-expert"),
    path("experts/<slug:slug>/fallback/", expert.ExpertFallbackView.as_view(), name="console-expert-fallback"),
    path("experts/<slug:slug>/public/", expert.ExpertPublicView.as_view(), name="console-expert-public"),
    # The jobs app sits below experts: its pages get the expert access rules handed in.
    path("jobs/", include(job_urls(visible_slugs, editable_slugs, job_links.links_for, redactor_for))),
    path("keys/", keys.KeyListView.as_view(), name="console-keys"),
    path("keys/create/", keys.KeyCreateView.as_view(), name="console-key-create"),
    path("keys/<int:pk>/revoke/", keys.KeyRevokeView.as_view(), name="console-key-revoke"),
    path("audit/", audit.AuditLogView.as_view(), name="console-audit"),
    path("teams/", teams.TeamListView.as_view(), name="console-teams"),
    path("teams/<int:pk>/", teams.TeamView.as_view(), name="console-team"),
]
