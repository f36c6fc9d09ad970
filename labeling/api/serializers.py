"""Serializers for the labeling API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.utils.text import slugify
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sbcommon.api import ApiError

from .. import services
from ..models import ClusteringRun, Proposal, ReviewAction


def _team_field(help_text: str) -> serializers.SlugRelatedField:
    return serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all(), required=False, allow_null=True, default=None, help_text=help_text)


class QueryImportSerializer(serializers.Serializer):
    """A query log upload: the file (CSV/TSV with a ``text`` column, or JSON Lines), its source, its team, and whether to redact."""

    file = serializers.FileField(allow_empty_file=True, use_url=False, help_text="CSV/TSV with a 'text' column, or JSON Lines.")
    source = serializers.CharField(max_length=128, required=False, allow_blank=True, default="", help_text="Default: the file name.")
    redact = serializers.BooleanField(required=False, default=False, help_text="Replace e-mail addresses and phone numbers.")
    team = _team_field("The team (by name) the queries belong to. Default: the caller's only team; staff may leave it out for staff-only queries.")

    def validate_file(self, upload: Any) -> Any:
        try:
            services.check_upload(upload)
        except services.UploadRejected as exc:
            if exc.status == 413:
                raise ApiError(str(exc), status_code=413, code="file_too_large", param="file") from exc
            raise serializers.ValidationError(str(exc)) from exc
        return upload


# --- discovery runs, proposals and their review ----------------------------------------------------

class StartRunSerializer(serializers.Serializer):
    """A new clustering run of a team's queries; empty parameters are chosen from the data (as on the console's form)."""

    team = _team_field("The team (by name) whose queries are clustered. Default: the caller's only team; staff may leave it out for staff-only queries.")
    source = serializers.CharField(max_length=128, required=False, allow_blank=True, default="", help_text="One of the team's sources; empty: all of them.")
    eps = serializers.FloatField(min_value=0.01, max_value=1.0, required=False, allow_null=True, default=None, help_text="DBSCAN radius in cosine distance; null: read from the data.")
    min_samples = serializers.IntegerField(min_value=2, max_value=200, default=5, help_text="Queries within eps for a topic's core.")
    n_experts = serializers.IntegerField(min_value=1, max_value=100, required=False, allow_null=True, default=None,
                                         help_text="How many experts (departments) to group the topics into; null: suggested from the data.")


class NewExpertSerializer(serializers.Serializer):
    """A department made before discovery, so that its documents can be uploaded first and seed the proposals."""

    name = serializers.CharField(max_length=128, help_text="The department's name; its slug (the model name it answers as) is made from it.")
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="", help_text="What the department answers.")
    team = _team_field("The team (by name) that owns it. Default: the caller's only team; staff may leave it out for a staff-only expert.")

    def validate_name(self, name: str) -> str:
        name = " ".join(name.split())
        if not slugify(name):
            raise serializers.ValidationError("the name needs a letter or a digit")
        return name


class ExpertMadeSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    team = serializers.CharField(source="team.name", allow_null=True, default=None)
    documents_url = serializers.SerializerMethodField(help_text="Where its documents are uploaded.")

    def get_documents_url(self, expert) -> str:
        return f"/api/v1/experts/{expert.slug}/documents"


class ProposalSerializer(serializers.ModelSerializer):
    expert = serializers.SlugRelatedField(slug_field="slug", read_only=True, help_text="The expert it was promoted to.")

    class Meta:
        model = Proposal
        fields = ["id", "run", "index", "name", "status", "size", "cohesion", "keywords", "representatives", "merged_into", "seed_queries", "expert"]


class RunSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = ClusteringRun
        fields = ["id", "status", "team", "source", "model", "eps", "min_samples", "n_experts", "n_queries", "n_topics", "noise_share", "created_at"]


class ActionSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReviewAction
        fields = ["id", "action", "summary", "created_at", "undone"]


class RunDetailSerializer(RunSerializer):
    """A run with its proposals (every status), how many queries no proposal holds, and its latest review actions."""

    proposals = ProposalSerializer(many=True, read_only=True)
    unassigned = serializers.SerializerMethodField()
    actions = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "unassigned", "proposals", "actions"]

    def get_unassigned(self, run: ClusteringRun) -> int:
        return run.assignments.filter(proposal__isnull=True).count()

    @extend_schema_field(ActionSerializer(many=True))
    def get_actions(self, run: ClusteringRun) -> list[dict[str, Any]]:
        return ActionSerializer(run.actions.all()[:30], many=True).data


class ReviewResultSerializer(serializers.Serializer):
    notice = serializers.CharField(help_text="What was done, in words.")
    run = RunDetailSerializer()


class RenameSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=128)


class SplitSerializer(serializers.Serializer):
    k = serializers.IntegerField(min_value=2, max_value=20, help_text="How many proposals its queries are re-clustered into.")


class MergeSerializer(serializers.Serializer):
    proposals = serializers.ListField(child=serializers.IntegerField(), min_length=1, help_text="Ids of the run's proposals to merge.")
    target = serializers.IntegerField(required=False, allow_null=True, default=None, help_text="The one they merge into; default: the largest.")


class MoveSerializer(serializers.Serializer):
    queries = serializers.ListField(child=serializers.IntegerField(), min_length=1, required=False, help_text="Ids of the run's queries to move.")
    matching = serializers.CharField(required=False, max_length=200, help_text="Instead of ids: move every query holding all these words (any case).")
    source = serializers.IntegerField(required=False, allow_null=True, help_text="With matching: only the queries of this proposal (default: the whole run).")
    target = serializers.IntegerField(allow_null=True, help_text="The run's proposal they move to; null: out of every proposal.")

    def validate(self, attrs):
        if bool(attrs.get("queries")) == bool((attrs.get("matching") or "").strip()):
            raise serializers.ValidationError({"queries": "send either queries (ids) or matching (words), not both nor neither"})
        return attrs


class AttachNoiseSerializer(serializers.Serializer):
    max_distance = serializers.FloatField(min_value=0.0, max_value=2.0, default=0.35, help_text="Cosine distance to the nearest open proposal.")


class PromoteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=128, help_text="The expert's name.")
    description = serializers.CharField(required=False, allow_blank=True, default="", help_text="What it knows; default: from its queries.")
    team = _team_field("For a staff-only run: the team that owns the expert. A team's run promotes into that team.")
    seed_queries = serializers.ListField(child=serializers.CharField(), required=False, allow_null=True, default=None,
                                         help_text="Example queries kept with it; default: its representative queries.")


class QueryRowSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="query_id")
    text = serializers.CharField(source="query.text")
    topic = serializers.IntegerField(help_text="DBSCAN topic; -1 is noise.")
    documents_point_to = serializers.SerializerMethodField(
        help_text="In a run seeded by documents: the expert (slug) whose documents match the question best, where that is not its proposal's; else null.")

    def get_documents_point_to(self, assignment) -> str | None:
        return assignment.documents_point_to.slug if assignment.points_elsewhere else None
