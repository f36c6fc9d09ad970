from django.urls import include, path

from . import views

openai_urlpatterns = [
    path("chat/completions", views.ChatCompletionsView.as_view(), name="chat-completions"),
    path("models", views.ModelsView.as_view(), name="models"),
]

api_urlpatterns = [
    path("route", views.RouteView.as_view(), name="route"),
    path("feedback", views.FeedbackView.as_view(), name="feedback"),
]
api_urlpatterns += [path("", include("labeling.api.urls"))]
api_urlpatterns += [path("", include("knowledge.api.urls"))]
