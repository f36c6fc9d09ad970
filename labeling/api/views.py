"""``POST /api/v1/queries/import``: upload a query log; it is checked, stored and imported by a job for a team.

The caller is its ``experts.access.Principal`` (an API key, were one accepted here, acts as the user
who created it). The queries belong to a team the caller is in (``labeling.access.team_for_new_work``).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.access import Principal
from sbcommon.api import ApiError
from sbcommon.uploads import declared_over_limit

from .. import access, services
from .serializers import ImportAcceptedSerializer, QueryImportSerializer

# Room for the multipart boundaries and the other fields on top of the file itself.


class QueryImportView(APIView):
    """Upload a query log: validated before anything is written, then imported by a background job."""

    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        request={"multipart/form-data": QueryImportSerializer},
        responses={
            202: ImportAcceptedSerializer,
            400: OpenApiResponse(description="Empty, not UTF-8, a CSV without a 'text' column, not JSON Lines, or no team named by a member of several."),
            403: OpenApiResponse(description="The caller is in no team, or not in the team named."),
            413: OpenApiResponse(description="Larger than QUERY_IMPORT_MAX_BYTES."),
        },
    )
    def post(self, request):
        limit = services.max_import_bytes()
        length = declared_over_limit(request.META, limit)
        if length is not None:  # refused before the body is read, let alone stored
            raise ApiError(f"the upload is {length:,} bytes; the limit is {limit:,} bytes", status_code=413, code="file_too_large", param="file")
        user = Principal.of(request).user
        if not access.may_start_work(user):
            raise PermissionDenied(access.NO_TEAM)
        serializer = QueryImportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            job = services.accept_upload(data["file"], source=data["source"], redact=data["redact"], user=user, team=data["team"])
        except services.UploadRejected as exc:
            raise ApiError(str(exc), status_code=exc.status, param="file") from exc
        except access.TeamNeeded as exc:
            raise ApiError(str(exc), param="team") from exc
        job.refresh_from_db(fields=["status"])  # a worker (or eager mode) may have started it already
        body = {
            "job": job.pk, "status": job.status,
            "status_url": reverse("api-job", args=[job.pk]), "console_url": reverse("console-job", args=[job.pk]),
        }
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["status_url"]})
