"""The root URLconf: the console (sign-in, then each app's pages), the REST API, the OpenAI-compatible
API, health probes and metrics.

Console pages keep their URL names (``console-*``, ``labeling-*``, ``knowledge-*``); each app lists
its own in its ``urls.py``.
"""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from labeling.urls import expert_urlpatterns as labeling_expert_urlpatterns
from serving.api.urls import api_urlpatterns, openai_urlpatterns
from serving.metrics import metrics_view

from . import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("v1/", include(openai_urlpatterns)),
    path("api/v1/", include(api_urlpatterns)),
    path("api/v1/", include("experts.api.urls")),  # vLLM adapter registration
    path("api/v1/", include("routing.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # The console
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("", include("console.urls")),
    path("", include("routing.urls")),
    path("", include("routing.experiments.urls")),
    path("", include("routing.schedules.urls")),
    path("", include("routing.alarms.urls")),
    path("experts/", include("experts.urls")),
    path("experts/", include(labeling_expert_urlpatterns)),  # grounded examples: labeling's action on an expert page
    path("discovery/", include("labeling.urls")),
    path("knowledge/", include("knowledge.urls")),
]
