"""The router learns from every team's review: each expert's labels come from the newest run that promoted it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from labeling import proposals as edits
from labeling import selectors

pytestmark = pytest.mark.django_db


def test_a_teams_newer_run_does_not_hide_another_teams_experts_from_the_router(make_run, team):
    other = Group.objects.create(name="Another team")
    ours = make_run({"Licences": (0, [f"renew my driving licence {i}" for i in range(6)])}, team=team)
    edits.promote_run(ours)
    theirs = make_run({"Payroll": (1, [f"when is payday {i}" for i in range(4)])}, team=other)
    edits.promote_run(theirs)

    runs = selectors.latest_promoted_runs()
    assert [r.pk for r in runs] == [theirs.pk, ours.pk]
    examples = selectors.routing_examples(runs)
    assert {e.expert for e in examples} == {"licences", "payroll"}
    assert len(examples) == 10


def test_an_experts_labels_come_from_the_newest_run_that_promoted_it(make_run, team):
    older = make_run({"Licences": (0, [f"old licence question {i}" for i in range(6)])}, team=team)
    edits.promote_run(older)
    newer = make_run({"Licences": (0, [f"new licence question {i}" for i in range(3)]),
                      "Pensions": (2, [f"state pension age {i}" for i in range(2)])}, team=team)
    edits.promote_run(newer)

    examples = selectors.routing_examples(selectors.latest_promoted_runs())
    assert sorted(e.text for e in examples if e.expert == "licences") == [f"new licence question {i}" for i in range(3)]
    assert selectors.promoted_run_of(newer.proposals.get(name="Licences").expert) == newer
