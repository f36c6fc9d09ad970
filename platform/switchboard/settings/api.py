"""The REST API (Django REST framework, the OpenAPI schema and its docs) and request body limits."""

from __future__ import annotations

from sbcommon.env import envint

# --- REST API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "sbcommon.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchboard API",
    "DESCRIPTION": "Route every question to the domain expert that knows the answer.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI served from the vendored sidecar package: no CDN behind a firewall.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"ProposalStatusEnum": "labeling.choices.ProposalStatus", "RunStatusEnum": "labeling.choices.RunStatus",
                            "ReviewActionKindEnum": "labeling.choices.ReviewActionKind"},
}

# --- request limits ---------------------------------------------------------------------------
# Request bodies: a chat request is small; uploads arrive through their own endpoints.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024  # the largest body read into memory
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024  # a larger upload is spooled to disk
QUERY_IMPORT_MAX_BYTES = envint("QUERY_IMPORT_MAX_BYTES", 2 * 1024**3)  # query-log uploads (streamed to disk)
DOCUMENT_UPLOAD_MAX_BYTES = envint("DOCUMENT_UPLOAD_MAX_BYTES", 100 * 1024**2)  # all files of one knowledge upload
