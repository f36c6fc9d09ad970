"""Console URLs of experiments, schedules and alarms (included from switchboard.urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("experiments/", views.ExperimentListView.as_view(), name="console-experiments"),
    path("experiments/<int:pk>/", views.ExperimentDetailView.as_view(), name="console-experiment"),
    path("experiments/<int:pk>/<slug:action>/", views.ExperimentActionView.as_view(), name="console-experiment-action"),
    path("schedules/", views.ScheduleListView.as_view(), name="console-schedules"),
    path("schedules/<int:pk>/", views.ScheduleEditView.as_view(), name="console-schedule-edit"),
    path("schedules/run/<slug:name>/", views.ScheduleRunNowView.as_view(), name="console-schedule-run"),
    path("alarms/", views.AlarmListView.as_view(), name="console-alarms"),
    path("alarms/<int:pk>/acknowledge/", views.AlarmAcknowledgeView.as_view(), name="console-alarm-ack"),
]
