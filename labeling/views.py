"""Console pages for expert discovery: import query logs, start clustering runs, review their proposals.

Every page and action reads its run or proposal through ``labeling.access`` (another team's is a
404) and starts new work through services that settle its team (``access.team_for_new_work``).

Review actions are POST forms. Sent by htmx, they answer with the review body (the run's page
without its frame) for the page to swap in; sent without JavaScript, they redirect back to the run's
page with a message. Errors a reviewer can fix come back as 400 with the message in the body.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import TemplateView

from experts.access import get_expert_or_404
from sbcommon.console import LoginRequiredMixin, UploadPageMixin, csrf_failure, first_error
from sbcommon.uploads import declared_over_limit

from . import access, forms, selectors, services
from . import proposals as edits
from .access import TeamNeeded
from .choices import ProposalStatus, RunStatus
from .models import ClusteringRun, Proposal

# --- runs and starting one ------------------------------------------------------------------------

def _list_context(request: HttpRequest, form: forms.StartClusteringForm | None = None,
                  department_form: forms.NewDepartmentForm | None = None) -> dict[str, Any]:
    user = request.user
    return {
        "runs": selectors.runs(user),
        "form": form or forms.StartClusteringForm(user),
        "department_form": department_form or forms.NewDepartmentForm(user),
        "documented": selectors.documented_departments(user),
        "jobs": selectors.discovery_jobs(user),
        "query_count": selectors.query_count(user),
        "no_team": "" if access.may_start_work(user) else access.NO_TEAM,
    }


class RunListView(LoginRequiredMixin, TemplateView):
    """The clustering runs the user may see, the form that starts a new one, and their teams' latest import and discovery jobs."""

    template_name = "labeling/run_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_list_context(self.request)}


class StartClusteringView(LoginRequiredMixin, View):
    """Enqueue embedding + clustering of a team's queries as one job, then show its progress."""

    def post(self, request: HttpRequest) -> HttpResponse:
        if not access.may_start_work(request.user):  # the page says why (NO_TEAM)
            return render(request, "labeling/run_list.html", _list_context(request), status=403)
        form = forms.StartClusteringForm(request.user, request.POST)
        if not form.is_valid():
            return render(request, "labeling/run_list.html", _list_context(request, form), status=400)
        data = form.cleaned_data
        try:
            job = services.enqueue_discovery(
                data["source"] or "", data["eps"], data["min_samples"], data["n_experts"], user=request.user, team=data.get("team"),
            )
        except (TeamNeeded, PermissionDenied) as exc:
            form.add_error(None, forms.sentence(str(exc)))
            return render(request, "labeling/run_list.html", _list_context(request, form), status=400 if isinstance(exc, TeamNeeded) else 403)
        return redirect("console-job", job.pk)


class NewDepartmentView(LoginRequiredMixin, View):
    """Make an empty expert for a department, then go to its knowledge page to upload its documents."""

    def post(self, request: HttpRequest) -> HttpResponse:
        if not access.may_start_work(request.user):
            return render(request, "labeling/run_list.html", _list_context(request), status=403)
        form = forms.NewDepartmentForm(request.user, request.POST)
        if not form.is_valid():
            return render(request, "labeling/run_list.html", _list_context(request, department_form=form), status=400)
        data = form.cleaned_data
        try:
            expert = services.make_department(" ".join(data["name"].split()), data["description"], user=request.user, team=data.get("team"))
        except (TeamNeeded, PermissionDenied, ValueError) as exc:
            form.add_error("name" if isinstance(exc, services.DepartmentExists) else None, forms.sentence(str(exc)))
            status = 409 if isinstance(exc, services.DepartmentExists) else 403 if isinstance(exc, PermissionDenied) else 400
            return render(request, "labeling/run_list.html", _list_context(request, department_form=form), status=status)
        messages.success(request, f"{expert.name} is ready: upload its documents, then start discovery.")
        return redirect("knowledge-expert", expert.slug)


# --- import ---------------------------------------------------------------------------------------


@method_decorator(csrf_exempt, name="dispatch")  # checked in post(), after the size: see csrf_failure
class ImportView(LoginRequiredMixin, UploadPageMixin, View):
    """Upload a query log. ``upload.js`` posts it with a progress bar and follows the JSON answer to the job page."""

    template_name = "labeling/import.html"

    def _context(self, form: forms.ImportForm) -> dict[str, Any]:
        user = self.request.user
        return {
            "form": form, "max_bytes": services.max_import_bytes(), "jobs": selectors.discovery_jobs(user),
            "no_team": "" if access.may_start_work(user) else access.NO_TEAM,
        }

    def _refuse(self, form: forms.ImportForm, message: str, status: int) -> HttpResponse:
        if self._wants_json():
            return JsonResponse({"error": {"message": message}}, status=status)
        form.add_error(None, message)
        return render(self.request, self.template_name, self._context(form), status=status)

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, self._context(forms.ImportForm(request.user)))

    def post(self, request: HttpRequest) -> HttpResponse:
        limit = services.max_import_bytes()
        length = declared_over_limit(request.META, limit)
        if length is not None:
            return self._refuse(forms.ImportForm(request.user), f"The upload is {length:,} bytes; the limit is {limit:,} bytes.", 413)
        refused = csrf_failure(request)
        if refused is not None:
            return refused
        if not access.may_start_work(request.user):
            return self._refuse(forms.ImportForm(request.user), access.NO_TEAM, 403)
        form = forms.ImportForm(request.user, request.POST, request.FILES)
        if not form.is_valid():
            if self._wants_json():
                return JsonResponse({"error": {"message": first_error(form)}}, status=form.status)
            return render(request, self.template_name, self._context(form), status=form.status)
        data = form.cleaned_data
        try:
            job = services.accept_upload(data["file"], source=data["source"], redact=data["redact"], user=request.user, team=data.get("team"))
        except services.UploadRejected as exc:
            return self._refuse(form, forms.sentence(str(exc)), exc.status)
        except TeamNeeded as exc:
            return self._refuse(form, forms.sentence(str(exc)), 400)
        except PermissionDenied as exc:
            return self._refuse(form, str(exc), 403)
        job_url = reverse("console-job", args=[job.pk])
        if self._wants_json():
            return JsonResponse({"job": job.pk, "job_url": job_url}, status=202)
        return redirect(job_url)


# --- review ---------------------------------------------------------------------------------------

def _review_context(request: HttpRequest, run: ClusteringRun, error: str = "", notice: str = "") -> dict[str, Any]:
    review = selectors.run_review(run, request.GET.get("unassigned") or 1)
    for row in review.rows:
        row.promote_form = forms.PromoteForm(row.proposal)  # type: ignore[attr-defined]
    return {
        "run": run, "review": review, "error": error, "notice": notice,
        "editable": review.editable_proposals,
        "attach_form": forms.AttachNoiseForm(), "draft": run.status == RunStatus.DRAFT,
    }


class RunView(LoginRequiredMixin, View):
    """One clustering run's review page."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = access.get_run_or_404(request.user, pk)
        edits.ensure_proposal_stats(run)
        return render(request, "labeling/run_detail.html", _review_context(request, run))


class UnassignedView(LoginRequiredMixin, View):
    """One page of the run's unassigned queries (htmx pagination)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = access.get_run_or_404(request.user, pk)
        page = selectors.unassigned_page(run, request.GET.get("page") or 1)
        proposals = list(run.proposals.filter(status=ProposalStatus.PROPOSED))
        return render(request, "labeling/partials/unassigned.html", {
            "run": run, "page": page, "queries": selectors.with_nearest(run, page.object_list, proposals),
            "editable": selectors.editable_proposals(run), "draft": run.status == RunStatus.DRAFT,
        })


class ProposalQueriesView(LoginRequiredMixin, View):
    """One page of a proposal's queries, with a form to move some of them (htmx)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        proposal = access.get_proposal_or_404(request.user, pk)
        page = selectors.proposal_queries(proposal, request.GET.get("page") or 1)
        return render(request, "labeling/partials/proposal_queries.html", {
            "proposal": proposal, "run": proposal.run, "page": page,
            "editable": [p for p in selectors.editable_proposals(proposal.run) if p.pk != proposal.pk],
            "can_move": proposal.status == ProposalStatus.PROPOSED and proposal.run.status == RunStatus.DRAFT,
        })


class ReviewActionView(LoginRequiredMixin, View):
    """A review action on a run (``pk`` is the run) or on a proposal (``proposal_action = True``)."""

    proposal_action = False

    def act(self, request: HttpRequest, run: ClusteringRun, proposal: Proposal | None) -> str:
        raise NotImplementedError

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        if self.proposal_action:
            proposal = access.get_proposal_or_404(request.user, pk)
            run = proposal.run
        else:
            proposal, run = None, access.get_run_or_404(request.user, pk)
        error = notice = ""
        try:
            notice = self.act(request, run, proposal)
        except edits.ReviewError as exc:
            error = forms.sentence(str(exc))
        if not request.htmx:
            if error:
                messages.error(request, error)
            else:
                messages.success(request, notice)
            return redirect("labeling-run", run.pk)
        run.refresh_from_db()
        return render(request, "labeling/partials/run_body.html", _review_context(request, run, error, notice), status=400 if error else 200)


def _valid(form: Any) -> dict[str, Any]:
    if not form.is_valid():
        raise edits.ReviewError(first_error(form))
    return form.cleaned_data


class RenameView(ReviewActionView):
    proposal_action = True

    def act(self, request, run, proposal):
        old = proposal.name
        edits.rename_proposal(proposal, _valid(forms.RenameForm(request.POST))["name"], user=request.user)
        return f"Renamed '{old}' to '{proposal.name}'."


class DiscardView(ReviewActionView):
    proposal_action = True

    def act(self, request, run, proposal):
        edits.discard_proposal(proposal, user=request.user)
        return f"Discarded '{proposal.name}'."


class SplitView(ReviewActionView):
    proposal_action = True

    def act(self, request, run, proposal):
        children = edits.split_proposal(proposal, _valid(forms.SplitForm(request.POST))["k"], user=request.user)
        return f"Split '{proposal.name}' into {len(children)} proposals."


class PromoteView(ReviewActionView):
    proposal_action = True

    def act(self, request, run, proposal):
        data = _valid(forms.PromoteForm(proposal, request.POST))
        team = access.promotion_team(request.user, proposal, data["name"], data.get("team"))
        expert = edits.promote_proposal(
            proposal, data["name"], data["description"], team=team, seed_queries=data["seed_queries"], user=request.user,
        )
        return f"Promoted '{expert.name}' to an expert ({expert.slug})."


class MergeView(ReviewActionView):
    def act(self, request, run, proposal):
        data = _valid(forms.MergeForm(run, request.POST))
        target, count = edits.merge_chosen(run, data["all"], data["target"], user=request.user)
        return f"Merged {count} proposals into '{target.name}'."


class MoveView(ReviewActionView):
    def act(self, request, run, proposal):
        data = _valid(forms.MoveForm(run, request.POST))
        target = edits.proposal_of(run, None if data["target"] == "none" else int(data["target"]))
        matching = "" if data["queries"] else (data["matching"] or "").strip()  # the selected queries, else the typed words
        if matching:
            source = edits.proposal_of(run, int(data["source"])) if data["source"] else None
            count = edits.move_matching(run, matching, target, source=source, user=request.user)
        else:
            count = edits.move_queries(run, data["queries"], target, user=request.user)
        chosen = f" matching '{matching}'" if matching else ""
        return f"Moved {count} {'query' if count == 1 else 'queries'}{chosen} to {target.name if target else 'unassigned'}."


class DetachNoiseView(ReviewActionView):
    def act(self, request, run, proposal):
        count = edits.detach_noise(run, user=request.user)
        return f"Detached {count} noise queries; attach back the close ones below."


class AttachNoiseView(ReviewActionView):
    def act(self, request, run, proposal):
        distance = _valid(forms.AttachNoiseForm(request.POST))["max_distance"]
        count = edits.attach_noise(run, distance, user=request.user)
        return f"Attached {count} queries within distance {distance:.2f}."


class UndoView(ReviewActionView):
    def act(self, request, run, proposal):
        action = edits.undo_last(run, user=request.user)
        return f"Undid: {action.summary}."


class FinishView(ReviewActionView):
    def act(self, request, run, proposal):
        access.check_finish(request.user)
        experts = edits.promote_run(run, user=request.user)
        return f"Review finished: {len(experts)} experts; the router trains on this run from now on."


class DiscardRunView(LoginRequiredMixin, View):
    """POST: discard a run in review (the confirmation box ticked), then the runs list; a promoted run stays, with the reason."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = access.get_run_or_404(request.user, pk)
        if request.POST.get("confirm") != "yes":
            messages.error(request, "Tick the box to confirm that the run is to be discarded.")
            return redirect("labeling-run", run.pk)
        try:
            services.discard_run(run, user=request.user)
        except edits.ReviewError as exc:
            messages.error(request, forms.sentence(str(exc)))
            return redirect("labeling-run", run.pk)
        messages.success(request, f"Discarded clustering #{run.pk}: it no longer appears among the runs.")
        return redirect("labeling-runs")


# --- grounded training examples (a button on the expert's training data page) ---------------------

class GroundedExamplesView(LoginRequiredMixin, View):
    """POST: start building grounded examples for the expert, then show the job's progress."""

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        expert = get_expert_or_404(request.user, slug, edit=True)
        return redirect("console-job", services.enqueue_grounded_examples(expert, user=request.user).pk)
