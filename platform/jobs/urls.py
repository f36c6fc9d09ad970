"""Console URLs for background jobs (included by the console's URLconf at ``jobs/``).

``console_urls`` takes the expert access rules from the app above (the jobs app cannot import it);
``urlpatterns`` is the same pages for staff and job creators only.
"""

from django.urls import URLPattern, path

from . import views


def console_urls(visible_slugs: views.SlugsFor | None = None, editable_slugs: views.SlugsFor | None = None) -> list[URLPattern]:
    rules = {
        "visible_slugs": visible_slugs or views._no_slugs,
        "editable_slugs": editable_slugs or views._no_slugs,
    }
    return [
        path("", views.JobListView.as_view(**rules), name="console-jobs"),
        path("rows/", views.JobRowsView.as_view(**rules), name="console-job-rows"),
        path("<int:pk>/", views.JobDetailView.as_view(**rules), name="console-job"),
        path("<int:pk>/body/", views.JobBodyView.as_view(**rules), name="console-job-body"),
        path("<int:pk>/retry/", views.JobRetryView.as_view(**rules), name="console-job-retry"),
        path("<int:pk>/cancel/", views.JobCancelView.as_view(**rules), name="console-job-cancel"),
    ]


urlpatterns = console_urls()
