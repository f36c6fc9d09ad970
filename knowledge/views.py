"""Console pages for knowledge bases: every expert's collection at a glance, and one expert's page.

An expert's page lists its documents (title, version, chunks, when indexed), uploads new ones with
a progress bar (``upload.js``, the same script as the query import), edits its chunking, starts
re-index / rebuild / drop jobs, deletes documents, and searches the collection, showing what the
dense, the sparse and the hybrid search each return. Actions are POST forms that start a job and
go to its progress page.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import TemplateView

from encoders import embedding_space, get_encoder
from experts.access import can_edit, get_expert_or_404, visible_slugs
from experts.models import Expert
from sbcommon.console import LoginRequiredMixin, UploadPageMixin, csrf_failure, first_error
from sbcommon.uploads import UploadRejected, declared_over_limit

from . import forms, search, selectors, services
from .ingest import max_upload_bytes
from .models import Document
from .stores.contract import METHODS


class KnowledgeListView(LoginRequiredMixin, TemplateView):
    """Every expert's knowledge base: documents, chunks, pending and failed documents, embedding model."""

    template_name = "knowledge/expert_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        visible = visible_slugs(self.request.user)
        rows = [r for r in selectors.summaries() if r.expert.slug in visible]
        return {
            **super().get_context_data(**kwargs), "rows": rows, "stale": [r for r in rows if r.model_mismatch], "embedding_model": embedding_space(),
        }


def _expert_context(expert: Expert, **extra: Any) -> dict[str, Any]:
    context: dict[str, Any] = {
        "expert": expert, "summary": selectors.summary(expert), "documents": selectors.documents(expert),
        "jobs": selectors.expert_jobs(expert), "collection": selectors.collection_name(expert), "max_bytes": max_upload_bytes(),
        "upload_form": forms.UploadForm(), "chunking_form": forms.ChunkingForm(initial={"chunk_size": expert.chunk_size, "chunk_overlap": expert.chunk_overlap}),
        "search_form": forms.SearchForm(), "embedding_model": embedding_space(),
        "can_edit": True,  # the views that show the page to readers pass the real answer
    }
    context.update(extra)
    return context


class ExpertKnowledgeView(LoginRequiredMixin, View):
    """One expert's knowledge base."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        return render(request, "knowledge/expert_detail.html", _expert_context(expert, can_edit=can_edit(request.user, expert)))


@method_decorator(csrf_exempt, name="dispatch")  # checked in post(), after the size: see csrf_failure
class UploadView(LoginRequiredMixin, UploadPageMixin, View):
    """Upload documents. ``upload.js`` posts them with a progress bar and follows the JSON answer to the job page."""

    def _refuse(self, expert: Expert, form: forms.UploadForm, message: str, status: int) -> HttpResponse:
        if self._wants_json():
            return JsonResponse({"error": {"message": message}}, status=status)
        if message and not form.errors:
            form.add_error(None, message)
        return render(self.request, "knowledge/expert_detail.html", _expert_context(expert, upload_form=form), status=status)

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        limit = max_upload_bytes()
        length = declared_over_limit(request.META, limit)
        if length is not None:
            return self._refuse(expert, forms.UploadForm(), f"The upload is {length:,} bytes; the limit is {limit:,} bytes.", 413)
        refused = csrf_failure(request)
        if refused is not None:
            return refused
        form = forms.UploadForm(request.POST, request.FILES)
        if not form.is_valid():
            return self._refuse(expert, form, first_error(form), form.status)
        try:
            job = services.accept_uploads(expert, form.cleaned_data["files"], user=request.user)
        except UploadRejected as exc:
            return self._refuse(expert, form, forms.sentence(str(exc)), exc.status)
        job_url = reverse("console-job", args=[job.pk])
        if self._wants_json():
            return JsonResponse({"job": job.pk, "job_url": job_url}, status=202)
        return redirect(job_url)


class SearchView(LoginRequiredMixin, View):
    """Search the expert's collection three ways (dense, sparse, hybrid); an htmx request gets the results alone."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        if "q" not in request.GET:
            # Nothing asked yet (a bookmark, a link): the page with an empty search form, not an error.
            return render(request, "knowledge/expert_detail.html", _expert_context(expert, can_edit=can_edit(request.user, expert)))
        form = forms.SearchForm(request.GET)
        context: dict[str, Any] = {"expert": expert, "search_form": form, "results": None, "can_edit": can_edit(request.user, expert)}
        status = 200
        if form.is_valid():
            question, limit = form.cleaned_data["q"], form.cleaned_data.get("limit") or 5
            t0 = time.perf_counter()
            vector = get_encoder().encode([question])[0].tolist()
            embed_ms = (time.perf_counter() - t0) * 1000
            results = []
            for method in METHODS:
                t0 = time.perf_counter()
                hits = search.search_expert(expert, question, limit=limit, query_vector=vector, method=method)
                results.append({"method": method, "hits": hits, "ms": (time.perf_counter() - t0) * 1000})
            context.update(results=results, embed_ms=embed_ms, question=question)
        else:
            context["error"] = first_error(form)
            status = 400
        template = "knowledge/partials/search_results.html" if request.htmx else "knowledge/expert_detail.html"
        if not request.htmx:
            context = _expert_context(**context)  # context already holds the expert
        return render(request, template, context, status=status)


class ChunkingView(LoginRequiredMixin, View):
    """Save the expert's chunk size and overlap; a rebuild re-chunks the collection."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        form = forms.ChunkingForm(request.POST)
        if not form.is_valid():
            return render(request, "knowledge/expert_detail.html", _expert_context(expert, chunking_form=form), status=400)
        job = services.update_chunking(expert, form.cleaned_data["chunk_size"], form.cleaned_data["chunk_overlap"], user=request.user)
        if job is None:
            messages.info(request, "Chunking saved; there was nothing to re-index.")
            return redirect("knowledge-expert", expert.slug)
        return redirect("console-job", job.pk)


class JobActionView(LoginRequiredMixin, View):
    """A POST button that starts one job for the expert (``enqueue``, a service) and opens its progress page."""

    enqueue: Any = None  # set by urls.py: services.enqueue_index, enqueue_rebuild or enqueue_drop

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        return redirect("console-job", self.enqueue(expert, user=request.user).pk)


class ReembedView(LoginRequiredMixin, View):
    """Rebuild every collection built with another embedding model than the configured one."""

    def post(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may rebuild every collection.")
        jobs = services.enqueue_reembed_stale(user=request.user)
        if not jobs:
            messages.info(request, "Every collection already uses the configured embedding model.")
        else:
            messages.success(request, f"Started {len(jobs)} rebuild {'job' if len(jobs) == 1 else 'jobs'} with the configured embedding model.")
        return redirect("knowledge-list")


class DeleteDocumentView(LoginRequiredMixin, View):
    """Delete one document and its chunks (a job), then come back to the expert's page."""

    def post(self, request: HttpRequest, slug: str, pk: int) -> HttpResponse:
        get_expert_or_404(request.user, slug, edit=True)
        document = get_object_or_404(Document.objects.select_related("expert").defer("text"), pk=pk, expert__slug=slug)
        job = services.enqueue_delete(document, user=request.user)
        job.refresh_from_db(fields=["status"])
        messages.success(request, f"Deleting '{document.title}' (job #{job.pk}).")
        return redirect("knowledge-expert", slug)
