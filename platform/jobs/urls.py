"""Console URLs for background jobs (included by the console's URLconf at ``jobs/``).

``console_urls`` takes the expert access rules from the app above (the jobs app cannot import it).
"""

from django.urls import URLPattern, path

from . import views


def console_urls(visible_slugs: views.SlugsFor, editable_slugs: views.SlugsFor, outcome_links: views.LinksFor,
                 redact_for: views.RedactFor) -> list[URLPattern]:
    """The job pages with the console's access rules, its links to what each job made (``outcome_links``) and how a
    user's pages hide other teams' experts in a job's text (``redact_for``)."""
    rules = {"visible_slugs": visible_slugs, "editable_slugs": editable_slugs, "outcome_links": outcome_links, "redact_for": redact_for}
    return [
        path("", views.JobListView.as_view(**rules), name="console-jobs"),
        path("rows/", views.JobRowsView.as_view(**rules), name="console-job-rows"),
        path("<int:pk>/", views.JobDetailView.as_view(**rules), name="console-job"),
        path("<int:pk>/body/", views.JobBodyView.as_view(**rules), name="console-job-body"),
        path("<int:pk>/retry/", views.JobRetryView.as_view(**rules), name="console-job-retry"),
        path("<int:pk>/cancel/", views.JobCancelView.as_view(**rules), name="console-job-cancel"),
    ]
