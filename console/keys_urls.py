"""Console URLs of the API-key pages (included under ``keys/`` by routing/urls.py)."""

from django.urls import path

from . import keys as keys_views

urlpatterns = [
    path("", keys_views.KeyListView.as_view(), name="console-keys"),
    path("create/", keys_views.KeyCreateView.as_view(), name="console-key-create"),
    path("<int:pk>/revoke/", keys_views.KeyRevokeView.as_view(), name="console-key-revoke"),
]
