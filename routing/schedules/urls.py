"""Console URLs of the schedules page (included from switchboard.urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("schedules/", views.ScheduleListView.as_view(), name="console-schedules"),
    path("schedules/<int:pk>/", views.ScheduleEditView.as_view(), name="console-schedule-edit"),
    path("schedules/run/<slug:name>/", views.ScheduleRunNowView.as_view(), name="console-schedule-run"),
]
