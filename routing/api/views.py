"""``/api/v1/router/...``: train a router, list its versions with their figures and activation verdict, activate one;
``/api/v1/experiments/...``: A/B experiments between two versions of an expert or of the router.

A router serves every team, so its versions are open to every signed-in user (the experts a member may
not see are counted, not named); training and activating are staff decisions, as on the console.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.redaction import hidden_slugs, redactor_for
from jobs.api.serializers import JobAcceptedSerializer
from jobs.api.views import accepted
from sbcommon.api import ApiError

from .. import services
from ..experiments import selectors as experiment_selectors
from ..experiments import services as experiments
from ..experiments.forms import experiment_form
from ..forms import TrainRouterForm
from ..models import RouterVersion
from .serializers import ExperimentSerializer, NewExperimentSerializer, RouterVersionSerializer, TrainSerializer


def _sent(request) -> dict:
    return request.data.dict() if hasattr(request.data, "dict") else dict(request.data)


def _versions(request, versions, many: bool = False) -> Response:
    context = {"hidden": hidden_slugs(request.user), "redact": redactor_for(request.user)}
    return Response(RouterVersionSerializer(versions, many=many, context=context).data)


class TrainView(APIView):
    @extend_schema(request=TrainSerializer, responses={
        202: JobAcceptedSerializer, 400: OpenApiResponse(description="A parameter out of range: the field's error."),
        403: OpenApiResponse(description="Not staff."),
    })
    def post(self, request):
        """Start a router training (staff); ``activation`` says how the new version goes live: if_better, never or always."""
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may train the router.")
        form = TrainRouterForm({**{key: field.initial for key, field in TrainRouterForm.base_fields.items()}, **_sent(request)})
        if not form.is_valid():
            raise ValidationError(form.errors)
        return accepted(services.enqueue_training(form.params(), request.user))


class VersionListView(APIView):
    @extend_schema(responses={200: RouterVersionSerializer(many=True)})
    def get(self, request):
        """Every router version, newest first, with its figures and activation verdict."""
        return _versions(request, RouterVersion.objects.order_by("-version")[:100], many=True)


class VersionDetailView(APIView):
    @extend_schema(responses={200: RouterVersionSerializer, 404: OpenApiResponse(description="No such version.")})
    def get(self, request, version: int):
        """One router version with its figures and activation verdict."""
        return _versions(request, get_object_or_404(RouterVersion, version=version))


class ActivateView(APIView):
    @extend_schema(request=None, responses={200: RouterVersionSerializer, 403: OpenApiResponse(description="Not staff."),
                                            404: OpenApiResponse(description="No such version.")})
    def post(self, request, version: int):
        """Make this version the serving router (staff); the one serving before becomes a candidate."""
        if not request.user.is_staff:
            raise PermissionDenied("Only staff users may activate a router version.")
        return _versions(request, services.activate_version(get_object_or_404(RouterVersion, version=version)))


class ExperimentListView(APIView):
    @extend_schema(responses={200: ExperimentSerializer(many=True)})
    def get(self, request):
        """The experiments the caller may see: the router's, and those of the experts they may see."""
        return Response(ExperimentSerializer(experiment_selectors.visible_experiments(request.user)[:200], many=True).data)

    @extend_schema(request=NewExperimentSerializer, responses={
        201: ExperimentSerializer, 400: OpenApiResponse(description="Bad input: the field's error."),
        403: OpenApiResponse(description="A router experiment by a non-staff user."), 404: OpenApiResponse(description="An expert the caller may not change."),
    })
    def post(self, request):
        """Create a draft experiment with its power calculation (start it with its ``start`` action)."""
        form = experiment_form(request.user, {**{k: f.initial for k, f in experiment_form(request.user).fields.items() if f.initial is not None}, **_sent(request)})
        if not form.is_valid():
            raise ValidationError(form.errors)
        try:
            experiment = experiments.create_for(request.user, form.cleaned_data)
        except experiments.ExperimentError as exc:
            raise ValidationError({exc.param or "non_field_errors": [str(exc)]}) from exc
        return Response(ExperimentSerializer(experiment).data, status=201)


class ExperimentDetailView(APIView):
    @extend_schema(responses={200: ExperimentSerializer, 404: OpenApiResponse(description="No such experiment, or another team's.")})
    def get(self, request, pk: int):
        """One experiment, with its plan and latest decision."""
        experiment = experiment_selectors.experiment_for(request.user, pk)
        experiments.read(experiment)  # refreshes its decision
        return Response(ExperimentSerializer(experiment).data)


class ExperimentActionView(APIView):
    @extend_schema(operation_id="api_v1_experiments_action", request=None, responses={
        200: ExperimentSerializer, 204: OpenApiResponse(description="The draft was deleted."), 403: OpenApiResponse(description="The caller may not change it."),
        404: OpenApiResponse(description="No such experiment or action."), 409: OpenApiResponse(description="Its state forbids the action (the message says why)."),
    })
    def post(self, request, pk: int, action: str):
        """start, pause, stop, promote, keep_control, rollback or delete (a draft) an experiment."""
        experiment = experiment_selectors.experiment_for(request.user, pk)
        if action not in experiments.ACTIONS:
            raise ApiError(f"no action {action!r}; one of {', '.join(experiments.ACTIONS)}", status_code=404, code="not_found")
        if not experiment_selectors.may_change(request.user, experiment.expert, experiment.kind):
            raise PermissionDenied("You may not change this experiment.")
        try:
            experiments.ACTIONS[action](experiment)
        except experiments.ExperimentError as exc:
            raise ApiError(str(exc), status_code=409, code="conflict") from exc
        if action == "delete":
            return Response(status=204)
        experiment.refresh_from_db()
        return Response(ExperimentSerializer(experiment).data)
