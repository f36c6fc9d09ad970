"""``/api/v1/experts/{slug}/documents``: list an expert's documents, upload new ones, delete one."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.access import get_expert_or_404
from jobs.api.serializers import JobAcceptedSerializer
from jobs.api.views import accepted, upload_schema
from sbcommon.api import ApiError, refuse_declared_over
from sbcommon.uploads import UploadRejected

from .. import selectors, services
from ..ingest import max_upload_bytes
from ..models import Document
from .serializers import DocumentSerializer, DocumentUploadSerializer


class DocumentListView(APIView):
    """An expert's documents (GET), or new ones uploaded as multipart files (POST, answered 202 with the ingest job)."""

    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(responses={200: DocumentSerializer(many=True)})
    def get(self, request, slug: str):
        expert = get_expert_or_404(request.user, slug)  # another team's expert: 404
        return Response(DocumentSerializer(selectors.documents(expert), many=True).data)

    @upload_schema(DocumentUploadSerializer, {
        400: "No file, an empty file, or a kind that cannot be read (a binary file, an old .doc, a ZIP).",
        404: "No such expert.",
        413: "Larger than DOCUMENT_UPLOAD_MAX_BYTES (all files together).",
    })
    def post(self, request, slug: str):
        expert = get_expert_or_404(request.user, slug, edit=True)
        refuse_declared_over(request, max_upload_bytes(), "files")
        uploads = request.FILES.getlist("files") + request.FILES.getlist("file")
        if not uploads:
            raise ApiError("send one or more files in the multipart field 'files'", param="files")
        try:
            job = services.accept_uploads(expert, uploads, user=request.user)
        except UploadRejected as exc:
            code = "file_too_large" if exc.status == 413 else "invalid_request_error"
            raise ApiError(str(exc), status_code=exc.status, code=code, param="files") from exc
        return accepted(job)


class DocumentDetailView(APIView):
    """One document (GET), or its deletion with its chunks (DELETE, answered 202 with the job)."""

    @extend_schema(responses={200: DocumentSerializer})
    def get(self, request, slug: str, pk: int):
        get_expert_or_404(request.user, slug)
        return Response(DocumentSerializer(get_object_or_404(Document.objects.defer("text"), pk=pk, expert__slug=slug)).data)

    @extend_schema(request=None, responses={202: JobAcceptedSerializer, 404: OpenApiResponse(description="No such document.")})
    def delete(self, request, slug: str, pk: int):
        get_expert_or_404(request.user, slug, edit=True)
        document = get_object_or_404(Document.objects.select_related("expert").defer("text"), pk=pk, expert__slug=slug)
        return accepted(services.enqueue_delete(document, user=request.user))
