"""``POST /api/v1/queries/import``: upload a query log; it is checked, stored and imported by a job for a team.

``/api/v1/discovery/...``: start clustering runs, read them and their proposals, and review them (the console's
Discovery pages, action for action).

The caller is its ``experts.access.Principal`` (an API key, were one accepted here, acts as the user
who created it). The queries belong to a team the caller is in (``labeling.access.team_for_new_work``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.paginator import Page
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.access import Principal
from jobs.api.serializers import JobAcceptedSerializer
from jobs.api.views import accepted, upload_schema
from sbcommon.api import ApiError, refuse_declared_over

from .. import access, selectors, services
from .. import proposals as edits
from ..choices import RunStatus
from .serializers import (
    AttachNoiseSerializer,
    ExpertMadeSerializer,
    MergeSerializer,
    MoveSerializer,
    NewExpertSerializer,
    PromoteSerializer,
    ProposalSerializer,
    QueryImportSerializer,
    QueryRowSerializer,
    RenameSerializer,
    ReviewResultSerializer,
    RunDetailSerializer,
    RunSerializer,
    SplitSerializer,
    StartRunSerializer,
)


class QueryImportView(APIView):
    """Upload a query log: validated before anything is written, then imported by a background job."""

    parser_classes = [MultiPartParser, FormParser]

    @upload_schema(QueryImportSerializer, {
        400: "Empty, not UTF-8, a CSV without a 'text' column, not JSON Lines, or no team named by a member of several.",
        403: "The caller is in no team, or not in the team named.",
        413: "Larger than QUERY_IMPORT_MAX_BYTES.",
    })
    def post(self, request):
        refuse_declared_over(request, services.max_import_bytes(), "file")
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
        return accepted(job)


class ExpertCreateView(APIView):
    """A new, empty expert for a team's department, made before discovery: upload its documents, and discovery's
    proposals follow the departments whose documents answer the questions (``labeling.ml.seeding``)."""

    @extend_schema(request=NewExpertSerializer, responses={
        201: ExpertMadeSerializer, 400: OpenApiResponse(description="No name, a name without a letter or digit, or no team named by a member of several."),
        403: OpenApiResponse(description="The caller is in no team, or not in the team named."),
        409: OpenApiResponse(description="An expert with this name's slug exists."),
    })
    def post(self, request):
        user = Principal.of(request).user
        if not access.may_start_work(user):
            raise PermissionDenied(access.NO_TEAM)
        data = _valid(NewExpertSerializer, request)
        try:
            expert = services.make_department(data["name"], data["description"], user=user, team=data["team"])
        except access.TeamNeeded as exc:
            raise ApiError(str(exc), param="team") from exc
        except services.DepartmentExists as exc:
            raise ApiError(str(exc), status_code=409, code="conflict", param="name") from exc
        return Response(ExpertMadeSerializer(expert).data, status=201)


# --- discovery runs, their proposals and review ----------------------------------------------------
# Every run and proposal is read through labeling.access (another team's is a 404); each action calls the
# same service as the console's button. A state that forbids the action (a promoted run, a merged
# proposal, nothing to undo) is a 409; bad input is a 400 with the field's error.

def _valid(serializer_class: type[serializers.Serializer], request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _page(request, page: Page) -> Response:
    return Response({"count": page.paginator.count, "page": page.number, "pages": page.paginator.num_pages,
                     "queries": QueryRowSerializer(page.object_list, many=True).data})


_PAGE = OpenApiParameter("page", int, description="Page number (default 1).")
_REFUSALS = {404: OpenApiResponse(description="No such run or proposal, or another team's."),
             409: OpenApiResponse(description="The run is promoted, the proposal closed, or nothing is left to do.")}


class RunListView(APIView):
    """The clustering runs the caller may see (GET), or a new one started as a background job (POST, 202)."""

    @extend_schema(responses={200: RunSerializer(many=True)})
    def get(self, request):
        return Response(RunSerializer(selectors.runs(request.user).select_related("team"), many=True).data)

    @extend_schema(request=StartRunSerializer, responses={
        202: JobAcceptedSerializer, 400: OpenApiResponse(description="A parameter out of range, or no team named by a member of several."),
        403: OpenApiResponse(description="The caller is in no team (the message says so), or not in the team named."),
    })
    def post(self, request):
        if not access.may_start_work(request.user):
            raise PermissionDenied(access.NO_TEAM)
        data = _valid(StartRunSerializer, request)
        if data["source"] and data["source"] not in {source for _, source, _ in selectors.sources(request.user)}:
            raise serializers.ValidationError({"source": [f"none of your teams' queries come from {data['source']!r}"]})
        try:
            job = services.enqueue_discovery(data["source"], data["eps"], data["min_samples"], data["n_experts"], user=request.user, team=data["team"])
        except access.TeamNeeded as exc:
            raise ApiError(str(exc), param="team") from exc
        return accepted(job)


class RunDetailView(APIView):
    @extend_schema(responses={200: RunDetailSerializer, 404: _REFUSALS[404]})
    def get(self, request, pk: int):
        """A run: its status, parameters, proposals (every status), unassigned count and latest review actions."""
        return Response(RunDetailSerializer(access.get_run_or_404(request.user, pk)).data)


class UnassignedView(APIView):
    @extend_schema(parameters=[_PAGE], responses={200: OpenApiResponse(description="count, page, pages and queries (id, text, topic).")})
    def get(self, request, pk: int):
        """One page of the run's queries that no proposal holds."""
        return _page(request, selectors.unassigned_page(access.get_run_or_404(request.user, pk), request.query_params.get("page") or 1))


class ProposalDetailView(APIView):
    @extend_schema(responses={200: ProposalSerializer, 404: _REFUSALS[404]})
    def get(self, request, pk: int):
        """One proposal."""
        return Response(ProposalSerializer(access.get_proposal_or_404(request.user, pk)).data)


class ProposalQueriesView(APIView):
    @extend_schema(parameters=[_PAGE], responses={200: OpenApiResponse(
        description="count, page, pages and queries (id, text, topic, documents_point_to), those whose documents point to another expert first.")})
    def get(self, request, pk: int):
        """One page of a proposal's queries (their ids are what a move sends)."""
        return _page(request, selectors.proposal_queries(access.get_proposal_or_404(request.user, pk), request.query_params.get("page") or 1))


# A review action on a run (``pk`` is the run) or on a proposal (``on_proposal``): its body validated by ``body`` (none: no
# body), then ``act`` does it and says what it did; the answer is that and the run as it is afterwards. (No docstring: the
# schema would give it to every action as its description.)
class ReviewActionView(APIView):
    on_proposal = False
    body: type[serializers.Serializer] | None = None

    def act(self, request, target: Any, data: dict[str, Any]) -> str:
        raise NotImplementedError

    def post(self, request, pk: int) -> Response:
        target = access.get_proposal_or_404(request.user, pk) if self.on_proposal else access.get_run_or_404(request.user, pk)
        data = _valid(self.body, request) if self.body is not None else {}
        try:
            notice = self.act(request, target, data)
        except edits.ReviewConflict as exc:
            raise ApiError(str(exc), status_code=409, code="conflict") from exc
        except edits.ReviewError as exc:
            raise ApiError(str(exc)) from exc
        run = target.run if self.on_proposal else target
        run.refresh_from_db()
        return Response({"notice": notice, "run": RunDetailSerializer(run).data})


def review_action(body: type[serializers.Serializer] | None, summary: str, on_proposal: bool = False) -> Callable[[type[APIView]], type[APIView]]:
    """A review action's body and whether it acts on a proposal, and its schema: the body, the run as it is afterwards, and its refusals."""

    def decorate(view: type[ReviewActionView]) -> type[APIView]:
        view.body, view.on_proposal = body, on_proposal
        return extend_schema_view(post=extend_schema(summary=summary, request=body, responses={
            200: ReviewResultSerializer, 400: OpenApiResponse(description="Bad input: the field's error."),
            403: OpenApiResponse(description="The caller may not do this (finishing a review, promoting over another team's expert)."), **_REFUSALS,
        }))(view)
    return decorate


@review_action(RenameSerializer, "Rename a proposal", on_proposal=True)
class RenameView(ReviewActionView):
    def act(self, request, proposal, data):
        return f"Renamed to '{edits.rename_proposal(proposal, data['name'], user=request.user).name}'."


@review_action(SplitSerializer, "Split a proposal by re-clustering its own queries", on_proposal=True)
class SplitView(ReviewActionView):
    def act(self, request, proposal, data):
        return f"Split '{proposal.name}' into {len(edits.split_proposal(proposal, data['k'], user=request.user))} proposals."


@review_action(None, "Discard a proposal", on_proposal=True)
class DiscardView(ReviewActionView):
    def act(self, request, proposal, data):
        return f"Discarded '{edits.discard_proposal(proposal, user=request.user).name}'."


@review_action(PromoteSerializer, "Promote a proposal to an expert", on_proposal=True)
class PromoteView(ReviewActionView):
    def act(self, request, proposal, data):
        team = access.promotion_team(request.user, proposal, data["name"], data["team"])
        expert = edits.promote_proposal(proposal, data["name"], data["description"], team=team, seed_queries=data["seed_queries"], user=request.user)
        return f"Promoted '{expert.name}' to an expert ({expert.slug})."


@review_action(MergeSerializer, "Merge proposals of the run")
class MergeView(ReviewActionView):
    def act(self, request, run, data):
        target, count = edits.merge_chosen(run, data["proposals"], data["target"], user=request.user)
        return f"Merged {count} proposals into '{target.name}'."


@review_action(MoveSerializer, "Move queries to another proposal of the run (or out of every proposal)")
class MoveView(ReviewActionView):
    def act(self, request, run, data):
        target = edits.proposal_of(run, data["target"])
        if data.get("matching"):
            count = edits.move_matching(run, data["matching"], target, source=edits.proposal_of(run, data.get("source")), user=request.user)
            return f"Moved {count} queries matching '{data['matching'].strip()}'."
        return f"Moved {edits.move_queries(run, data['queries'], target, user=request.user)} queries."


@review_action(None, "Take every noise query out of its proposal")
class DetachNoiseView(ReviewActionView):
    def act(self, request, run, data):
        return f"Detached {edits.detach_noise(run, user=request.user)} noise queries."


@review_action(AttachNoiseSerializer, "Attach unassigned queries to their nearest proposal within a distance")
class AttachNoiseView(ReviewActionView):
    def act(self, request, run, data):
        return f"Attached {edits.attach_noise(run, data['max_distance'], user=request.user)} queries."


@review_action(None, "Undo the run's latest review action")
class UndoView(ReviewActionView):
    def act(self, request, run, data):
        return f"Undid: {edits.undo_last(run, user=request.user).summary}."


@review_action(None, "Finish the review: promote every open proposal and the run (staff)")
class FinishView(ReviewActionView):
    def act(self, request, run, data):
        access.check_finish(request.user)
        if run.status == RunStatus.PROMOTED:
            raise edits.ReviewConflict("this run is promoted already")
        return f"Review finished: {len(edits.promote_run(run, user=request.user))} experts."


@review_action(None, "Discard a run nobody will finish: it leaves the runs list and takes no more review actions")
class DiscardRunView(ReviewActionView):
    def act(self, request, run, data):
        try:
            services.discard_run(run, user=request.user)
        except edits.ReviewError as exc:  # promoted or discarded already: the run's state
            raise edits.ReviewConflict(str(exc)) from exc
        return f"Discarded clustering #{run.pk}."
