"""``manage.py experts``: a team's path from the shell (discover, review, promote, train, activate), jobs run with --here."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from experts.models import Expert
from labeling.models import ClusteringRun, Proposal
from routing.models import RouterVersion

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command("experts", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def imported(tmp_path, settings):
    """Twenty questions of each of the demo's four agencies, imported for team Support by the import command."""
    settings.ROUTER_DIR = tmp_path / "routers"
    Group.objects.create(name="Support")
    rows, seen = [], {}
    for row in map(json.loads, (ROOT / "demo" / "queries.jsonl").read_text().splitlines()):
        if row["split"] == "train" and seen.get(row["label"], 0) < 20:
            seen[row["label"]] = seen.get(row["label"], 0) + 1
            rows.append({"text": row["text"], "label": row["label"]})
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    call_command("import_queries", str(log), "--team", "Support", stdout=StringIO())
    return rows


def test_a_team_goes_from_imported_questions_to_a_serving_router_from_the_shell(imported):
    found = run("discover", "--team", "Support", "--experts", "4", "--here")

    discovery = ClusteringRun.objects.get()
    assert f"run {discovery.pk}: 4 proposals to review" in found
    assert discovery.team.name == "Support"
    first, second, *_ = discovery.proposals.order_by("index")
    assert run("rename", str(discovery.pk), str(first.pk), "Licences").strip() == f"proposal {first.pk} is now 'Licences'"
    assert "Licences" in run("proposals", str(discovery.pk))
    assert run("discard", str(discovery.pk), str(second.pk)).startswith(f"discarded proposal {second.pk}")

    promoted = run("promote", str(discovery.pk))

    assert promoted.startswith("3 experts: ")
    assert Expert.objects.filter(name="Licences").exists()
    trained = run("train", "--here")
    version = RouterVersion.objects.get()
    assert f"router v{version.version} (serving)" in trained
    assert sorted(version.experts) == sorted(Expert.objects.values_list("slug", flat=True))
    assert "serving" in run("activate", str(version.version))


def test_bad_input_is_a_clear_error_and_changes_nothing(imported):
    with pytest.raises(CommandError, match="no team named 'Nobody'"):
        run("discover", "--team", "Nobody", "--here")
    with pytest.raises(CommandError, match="no discovery run 99"):
        run("proposals", "99")
    with pytest.raises(CommandError, match="no router version 7"):
        run("activate", "7")
    with pytest.raises(CommandError, match="--experts must be at least 1"):
        run("discover", "--experts", "0", "--here")
    assert not ClusteringRun.objects.exists()
    assert not Proposal.objects.exists()
