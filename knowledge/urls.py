"""Console URLs for knowledge bases (included by the console's URLconf at ``knowledge/``)."""

from django.urls import path

from . import services, views

urlpatterns = [
    path("", views.KnowledgeListView.as_view(), name="knowledge-list"),
    path("reembed/", views.ReembedView.as_view(), name="knowledge-reembed"),
    path("<slug:slug>/", views.ExpertKnowledgeView.as_view(), name="knowledge-expert"),
    path("<slug:slug>/upload/", views.UploadView.as_view(), name="knowledge-upload"),
    path("<slug:slug>/search/", views.SearchView.as_view(), name="knowledge-search"),
    path("<slug:slug>/chunking/", views.ChunkingView.as_view(), name="knowledge-chunking"),
    path("<slug:slug>/index/", views.JobActionView.as_view(enqueue=services.enqueue_index), name="knowledge-index"),
    path("<slug:slug>/rebuild/", views.JobActionView.as_view(enqueue=services.enqueue_rebuild), name="knowledge-rebuild"),
    path("<slug:slug>/drop/", views.JobActionView.as_view(enqueue=services.enqueue_drop), name="knowledge-drop"),
    path("<slug:slug>/documents/<int:pk>/delete/", views.DeleteDocumentView.as_view(), name="knowledge-delete"),
]
