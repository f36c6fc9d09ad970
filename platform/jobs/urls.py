"""Console URLs for background jobs (included by the console's URLconf at ``jobs/``)."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.JobListView.as_view(), name="console-jobs"),
    path("rows/", views.JobRowsView.as_view(), name="console-job-rows"),
    path("<int:pk>/", views.JobDetailView.as_view(), name="console-job"),
    path("<int:pk>/body/", views.JobBodyView.as_view(), name="console-job-body"),
]
