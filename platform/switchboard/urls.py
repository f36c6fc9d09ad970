"""Top-level URLs: console pages, the REST API, the OpenAI-compatible API, health probes."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from routing.api.urls import api_urlpatterns, openai_urlpatterns
from routing.metrics import metrics_view

from . import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("v1/", include(openai_urlpatterns)),
    path("api/v1/", include(api_urlpatterns)),
    path("api/v1/", include("experts.api.urls")),  # vLLM adapter registration (engineer vllm)
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("routing.experiments.urls")),
    path("experts/", include("experts.urls")),
    path("", include("routing.urls")),
]
