"""Console pages for an expert's adapters: versions, training data, training and the prompt.

Everything lives under ``/experts/<slug>/adapters/`` (the expert's overview page is the routing
app's). Reading needs ``can_view``; every change needs ``can_edit`` (``experts.access``). Changes are
POST forms that redirect back (or to the training job's live progress page).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from jobs.models import Job
from sbcommon.console import LoginRequiredMixin

from . import forms, services
from .access import can_edit, get_expert_or_404
from .choices import ExampleSplit, VersionStatus
from .ml.lora import MIN_EXAMPLES
from .ml.lora_errors import LoraError
from .models import Expert, ExpertVersion

COMPARED = (
    ("Status", lambda v: v.get_status_display()),
    ("Held-out loss", lambda v: v.metrics.get("eval_loss")),
    ("Held-out perplexity", lambda v: v.metrics.get("eval_perplexity")),
    ("Base model's held-out loss", lambda v: v.metrics.get("base_eval_loss")),
    ("Last training loss", lambda v: v.metrics.get("train_loss")),
    ("Steps", lambda v: v.metrics.get("steps")),
    ("Training / held-out examples", lambda v: f"{v.n_train} / {v.n_eval}"),
    ("Data snapshot", lambda v: v.data_fingerprint[:12] or "-"),
    ("Knowledge snapshot", lambda v: v.knowledge_snapshot or "-"),
    ("Base model", lambda v: v.base_model or "-"),
    ("Adapter", lambda v: v.adapter_path or "none (prompt only)"),
    ("Parameters", lambda v: ", ".join(f"{k}={val}" for k, val in sorted(v.training_params.items())) or "-"),
    ("Citation format", lambda v: v.citation_format),
    ("System prompt", lambda v: v.system_prompt or "(none)"),
)


def curve_points(curve: list[dict[str, float]], width: int = 240, height: int = 48) -> str:
    """An SVG polyline's points for a loss curve (step on x, loss on y, top = highest loss)."""
    if len(curve) < 2:
        return ""
    steps = [p["step"] for p in curve]
    losses = [p["loss"] for p in curve]
    lo, hi = min(losses), max(losses)
    span_x, span_y = (max(steps) - min(steps)) or 1, (hi - lo) or 1
    return " ".join(
        f"{(s - min(steps)) / span_x * width:.1f},{(hi - loss) / span_y * (height - 4) + 2:.1f}" for s, loss in zip(steps, losses, strict=True)
    )


def _compare(expert: Expert, request: HttpRequest) -> dict[str, Any] | None:
    try:
        a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        return None
    versions = {v.version: v for v in expert.versions.filter(version__in=[a, b])}
    if a not in versions or b not in versions:
        return None
    va, vb = versions[a], versions[b]
    rows = [(label, get(va), get(vb)) for label, get in COMPARED]
    return {"a": va, "b": vb, "rows": [(label, x, y, x != y) for label, x, y in rows]}


def _page_context(request: HttpRequest, expert: Expert, **extra: Any) -> dict[str, Any]:
    versions = list(expert.versions.select_related("job"))
    for v in versions:
        v.curve_points = curve_points(v.metrics.get("loss_curve", []))
    system_prompt, citation_format = services.current_prompt(expert)
    counts = {s: expert.training_examples.filter(split=s).count() for s in ExampleSplit.values}
    jobs = Job.objects.filter(kind="train_adapter", params__expert=expert.slug).order_by("-created_at")[:5]
    for job in jobs:
        job.curve_points = curve_points((job.result or {}).get("loss_curve", []))
    context = {
        "expert": expert, "versions": versions, "can_edit": can_edit(request.user, expert), "counts": counts,
        "train_form": forms.TrainForm(initial=forms.TrainForm.initial_from(services.default_training_params())),
        "prompt_form": forms.PromptForm(initial={"system_prompt": system_prompt, "citation_format": citation_format, "activate": True}),
        "compare": _compare(expert, request), "jobs": jobs, "base_model": settings.BASE_MODEL,
        "min_examples": MIN_EXAMPLES, "generator": settings.GENERATOR,
    }
    context.update(extra)
    return context


def _post_form(request: HttpRequest, expert: Expert, form: Any, name: str, refusal: type[Exception],
               act: Callable[[dict[str, Any]], HttpResponse]) -> HttpResponse:
    """``act`` on a valid ``form``; else, or when ``act`` raises ``refusal``, the page again with the form's errors (400)."""
    try:
        if form.is_valid():
            return act(form.cleaned_data)
    except refusal as exc:
        form.add_error(None, str(exc))
    return render(request, "experts/adapters.html", _page_context(request, expert, **{name: form}), status=400)


class AdaptersView(LoginRequiredMixin, View):
    """The expert's versions (metrics, compare, activate, roll back), training form and prompt editor."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        return render(request, "experts/adapters.html", _page_context(request, expert))


class TrainView(LoginRequiredMixin, View):
    """Validate the parameters and the data, then start the training job and show its progress."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        return _post_form(request, expert, forms.TrainForm(request.POST), "train_form", LoraError,
                          lambda data: redirect("console-job", services.start_adapter_training(expert, data, user=request.user).pk))


class PromptView(LoginRequiredMixin, View):
    """Save the prompt as a new version that shares the current adapter (and serve it, if asked)."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)

        def save(data: dict[str, Any]) -> HttpResponse:
            version = services.save_prompt(expert, data["system_prompt"], data["citation_format"], activate=data["activate"], user=request.user)
            state = "now serving" if version.status == VersionStatus.ACTIVE else "saved as a candidate"
            messages.success(request, f"Prompt saved as v{version.version}, {state}.")
            return redirect("expert-adapters", expert.slug)
        return _post_form(request, expert, forms.PromptForm(request.POST), "prompt_form", services.VersionError, save)


class ActivateView(LoginRequiredMixin, View):
    """Serve this version (the previous one is archived; activating an older one rolls back)."""

    def post(self, request: HttpRequest, slug: str, version: int) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        row = get_object_or_404(ExpertVersion, expert=expert, version=version)
        try:
            services.activate_version(row, user=request.user)
        except services.VersionError as exc:
            messages.error(request, f"v{version} was not activated: {exc}")
        else:
            messages.success(request, f"v{version} now serves {expert.name}.")
        return redirect("expert-adapters", expert.slug)


class TrainingDataView(LoginRequiredMixin, View):
    """The expert's training examples, with forms to add one, import a JSONL file, or build grounded ones."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug)
        return render(request, "experts/training_data.html", self.context(request, expert))

    @staticmethod
    def context(request: HttpRequest, expert: Expert, **extra: Any) -> dict[str, Any]:
        examples = expert.training_examples.all()
        split = request.GET.get("split", "")
        if split in ExampleSplit.values:
            examples = examples.filter(split=split)
        page = Paginator(examples, 50).get_page(request.GET.get("page"))
        context = {
            "expert": expert, "page": page, "split": split, "can_edit": can_edit(request.user, expert),
            "counts": {s: expert.training_examples.filter(split=s).count() for s in ExampleSplit.values},
            "example_form": forms.ExampleForm(), "import_form": forms.ImportForm(), "import_errors": [],
        }
        context.update(extra)
        return context


class AddExampleView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        form = forms.ExampleForm(request.POST)
        if form.is_valid():
            try:
                _, created = services.add_example(expert, form.cleaned_data["question"], form.cleaned_data["answer"],
                                                  split=form.cleaned_data["split"], user=request.user)
            except services.TrainingDataError as exc:
                form.add_error(None, "; ".join(exc.errors))
            else:
                messages.success(request, "Example added." if created else "This example was already there.")
                return redirect("expert-training-data", expert.slug)
        context = TrainingDataView.context(request, expert, example_form=form)
        return render(request, "experts/training_data.html", context, status=400)


class ImportExamplesView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        form = forms.ImportForm(request.POST, request.FILES)
        errors: list[str] = []
        if form.is_valid():
            try:
                report = services.import_examples(expert, form.cleaned_data["file"], user=request.user)
            except services.TrainingDataError as exc:
                errors = exc.errors
            else:
                messages.success(request, f"Imported {report.created} examples ({report.eval} held out); {report.duplicates} were already there.")
                return redirect("expert-training-data", expert.slug)
        context = TrainingDataView.context(request, expert, import_form=form, import_errors=errors[:50], import_error_count=len(errors))
        return render(request, "experts/training_data.html", context, status=400)


class DeleteExampleView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, slug: str, pk: int) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        if not services.delete_example(expert, pk):
            raise Http404("no such example")
        messages.success(request, "Example deleted.")
        return redirect("expert-training-data", expert.slug)
