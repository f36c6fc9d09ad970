"""Console forms for importing queries, starting a clustering run and reviewing its proposals."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import Group

from . import access, selectors, services
from . import proposals as edits
from .models import ClusteringRun, Proposal


def sentence(message: str) -> str:
    """A service's message ("the file is empty") as a sentence for the page ("The file is empty.")."""
    message = message.strip().rstrip(".")
    return message[:1].upper() + message[1:] + "."


def team_field(user: Any, what: str) -> forms.ModelChoiceField:
    """The team new work of ``user`` is for: staff choose any or none, a member of several teams one of theirs.

    A member of one team does not choose (the field is hidden and empty: ``access.team_for_new_work``
    gives their team), yet a team posted by hand must still be theirs.
    """
    teams = access.work_teams(user)
    if access.is_staff(user):
        return forms.ModelChoiceField(
            queryset=teams, required=False, empty_label="No team (staff only)", label="Team", help_text=f"Whose {what} these are.",
        )
    several = teams.count() > 1
    return forms.ModelChoiceField(
        queryset=teams, required=several, empty_label="Choose a team", label="Team", help_text=f"Whose {what} these are.",
        widget=forms.Select if several else forms.HiddenInput,
        error_messages={
            "required": "Choose the team this is for.",
            "invalid_choice": "You may import queries and start runs for your own teams only.",
        },
    )


class ImportForm(forms.Form):
    """A query log to upload, where it comes from, its team, and whether to redact personal data."""

    file = forms.FileField(allow_empty_file=True, error_messages={"required": "Choose a file to import."})
    source = forms.CharField(max_length=128, required=False, help_text="Where the queries come from. Default: the file name.")
    redact = forms.BooleanField(required=False, label="Redact e-mail addresses and phone numbers")

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["file"].widget.attrs.update(accept=".csv,.tsv,.jsonl,.ndjson,.json,text/csv,application/x-ndjson")
        self.fields["team"] = team_field(user, "queries")
        self.status = 400

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        try:
            services.check_upload(upload)
        except services.UploadRejected as exc:
            self.status = exc.status
            raise forms.ValidationError(sentence(str(exc))) from exc
        return upload


class NewDepartmentForm(forms.Form):
    """A department made before discovery, to upload its documents first (``services.make_department``)."""

    prefix = "department"  # beside the run's form on one page: its fields' ids stay apart
    name = forms.CharField(max_length=128, label="Department", widget=forms.TextInput(attrs={"placeholder": "e.g. Billing"}))
    description = forms.CharField(max_length=2000, required=False, label="What it answers", widget=forms.TextInput())

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"] = team_field(user, "department")


class StartClusteringForm(forms.Form):
    """The team and parameters of a new clustering run (empty fields are chosen from the data).

    A run clusters its team's queries only; ``source`` narrows them to one of the team's sources.
    """

    source = forms.ChoiceField(required=False, label="Queries")
    eps = forms.FloatField(
        required=False, min_value=0.01, max_value=1.0, label="eps",
        help_text="DBSCAN radius in cosine distance. Empty: read from the data.",
        widget=forms.NumberInput(attrs={"step": "0.01", "placeholder": "auto"}),
    )
    min_samples = forms.IntegerField(initial=5, min_value=2, max_value=200, label="Min samples", help_text="Queries within eps for a topic's core.")
    n_experts = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="Target experts",
        help_text="Proposals to group the topics into. Empty: suggested, or one for each department with documents.",
        widget=forms.NumberInput(attrs={"placeholder": "auto"}),
    )

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sources = selectors.sources(user)
        self.fields["team"] = team_field(user, "queries")
        self.order_fields(["team"])
        if self.fields["team"].widget.is_hidden:  # one team's sources (or none)
            self.fields["source"].choices = [("", "All sources")] + [(s, f"{s} ({n:,})") for _, s, n in self.sources]
            return
        names = dict(access.work_teams(user).values_list("pk", "name"))
        groups: dict[str, list[tuple[str, str]]] = {}
        for team_id, source, n in self.sources:
            groups.setdefault(names.get(team_id, "No team") if team_id else "No team", []).append((source, f"{source} ({n:,})"))
        self.fields["source"].choices = [("", "All sources of the team"), *sorted(groups.items())]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.fields["team"].widget.is_hidden and data.get("source") and "team" in data:
            team = data["team"]
            if (team.pk if team else None, data["source"]) not in {(t, s) for t, s, _ in self.sources}:
                raise forms.ValidationError(f"{team.name if team else 'No team'} has no source '{data['source']}'.")
        return data


class RenameForm(forms.Form):
    name = forms.CharField(max_length=128, error_messages={"required": "A proposal needs a name."})


class SplitForm(forms.Form):
    k = forms.IntegerField(min_value=2, max_value=20, initial=2, label="Parts")


def _open_choices(run: ClusteringRun) -> list[tuple[str, str]]:
    return [(str(p.pk), p.name) for p in selectors.editable_proposals(run)]


class IdListField(forms.Field):
    """Several ids under one name (checkboxes); which ids are allowed is the service's business."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        try:
            return [int(v) for v in value]
        except (TypeError, ValueError) as exc:
            raise forms.ValidationError("Not a list of ids.") from exc


class MergeForm(forms.Form):
    """Proposals to merge, and the one they merge into (default: the largest)."""

    proposals = forms.TypedMultipleChoiceField(coerce=int, error_messages={"required": "Select the proposals to merge."})
    target = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(self, run: ClusteringRun, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = _open_choices(run)
        self.fields["proposals"].choices = choices
        self.fields["target"].choices = [("", "the largest selected"), *choices]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        chosen = set(data.get("proposals") or [])
        if data.get("target"):
            chosen.add(data["target"])
        if "proposals" in data and len(chosen) < 2:
            raise forms.ValidationError("Select at least two proposals to merge.")
        data["all"] = chosen
        return data


class MoveForm(forms.Form):
    """Queries to move and where to: another proposal, or out of every proposal. The queries are the ones selected,
    or every query holding the words of ``matching`` (in ``source`` only, when one is chosen)."""

    queries = IdListField(required=False)
    matching = forms.CharField(required=False, max_length=200, label="Questions containing")
    source = forms.ChoiceField(required=False, label="from")
    target = forms.ChoiceField(error_messages={"required": "Choose where to move them."})

    def __init__(self, run: ClusteringRun, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = [("none", "Unassigned"), *_open_choices(run)]
        self.fields["source"].choices = [("", "any proposal"), *_open_choices(run)]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("queries") and not (data.get("matching") or "").strip():
            raise forms.ValidationError("Select the queries to move, or type words they contain.")
        return data


class AttachNoiseForm(forms.Form):
    max_distance = forms.FloatField(min_value=0.0, max_value=2.0, initial=0.35, label="Max distance",
                                    widget=forms.NumberInput(attrs={"step": "0.01"}))


class PromoteForm(forms.Form):
    """What the expert made from a proposal is called, what it knows, who owns it, and its seed queries."""

    name = forms.CharField(max_length=128)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    team = forms.ModelChoiceField(queryset=Group.objects.order_by("name"), required=False, empty_label="No team")
    seed_queries = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="Seed queries")

    def __init__(self, proposal: Proposal, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {
            "name": proposal.name, "description": edits.default_description(proposal), "seed_queries": proposal.representatives,
        })
        kwargs.setdefault("prefix", f"promote-{proposal.pk}")
        super().__init__(*args, **kwargs)
        self.fields["seed_queries"].choices = [(q, q) for q in proposal.representatives]
        if proposal.run.team_id is not None:
            del self.fields["team"]  # a team's run promotes into that team (labeling.proposals.promote_proposal)
