"""Console URLs of the alarms page (included from switchboard.urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("alarms/", views.AlarmListView.as_view(), name="console-alarms"),
    path("alarms/<int:pk>/acknowledge/", views.AlarmAcknowledgeView.as_view(), name="console-alarm-ack"),
]
