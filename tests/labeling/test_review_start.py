"""Starting a clustering run from the console: one job embeds what is missing and clusters with the product's defaults
(noise attached to its nearest proposal, still marked as noise so that a reviewer can detach it)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job
from labeling.ml import discovery
from labeling.models import Assignment, ClusteringRun
from labeling.proposals import detach_noise

from .conftest import add_query, direction

pytestmark = pytest.mark.django_db


@pytest.fixture
def queries(db, team):
    """Three tight groups of eight queries of ``team`` along their own axes, and two strays (embeddings already cached)."""
    topics = {0: "renew driving licence", 1: "passport appointment", 2: "state pension age"}
    for axis, words in topics.items():
        for i in range(8):
            add_query(f"{words} question {i}", direction(axis, jitter=0.03, seed=10 * axis + i), source="helpdesk", team=team)
    add_query("what is the weather", direction(9), source="helpdesk", team=team)
    add_query("tell me a joke", direction(12), source="helpdesk", team=team)


def test_the_runs_page_offers_the_sources_and_the_parameters(console, queries):
    html = console.get(reverse("labeling-runs")).content.decode()

    assert '<option value="helpdesk">helpdesk (26)</option>' in html
    assert 'name="eps"' in html
    assert 'name="min_samples"' in html
    assert 'name="n_experts"' in html
    assert "No clustering runs yet." in html


def test_starting_clustering_runs_one_job_and_lists_the_new_run(console, queries, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = console.post(reverse("labeling-start"), {"source": "helpdesk", "eps": "0.2", "min_samples": "3", "n_experts": "3"})

    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert (job.kind, job.status, job.error) == ("discover", "succeeded", "")
    run = ClusteringRun.objects.get(pk=job.result["run"])
    assert (run.n_queries, run.n_topics, run.proposals.count()) == (26, 3, 3)
    assert sorted(p.size for p in run.proposals.all()) == [8, 8, 10]  # the two strays joined their nearest proposal
    assert job.params["grouping"] == discovery.DEFAULT_GROUPING
    assert job.params["attach_noise"] is True
    assert not Assignment.objects.filter(run=run, proposal__isnull=True).exists()
    strays = Assignment.objects.filter(run=run, topic=-1)
    assert sorted(strays.values_list("query__text", flat=True)) == ["tell me a joke", "what is the weather"]
    for proposal in run.proposals.all():  # every proposal holds one topic whole
        assert Assignment.objects.filter(proposal=proposal).exclude(topic=-1).values("topic").distinct().count() == 1
    assert detach_noise(run) == 2  # the reviewer can still take the strays out
    html = console.get(reverse("labeling-runs")).content.decode()
    assert f'<a href="/discovery/runs/{run.pk}/">Clustering #{run.pk}</a>' in html


def test_bad_parameters_are_shown_on_the_form(console, queries):
    response = console.post(reverse("labeling-start"), {"source": "helpdesk", "eps": "5", "min_samples": "1"})

    assert response.status_code == 400
    html = response.content.decode()
    assert "Ensure this value is less than or equal to 1.0." in html
    assert "Ensure this value is greater than or equal to 2." in html
    assert not Job.objects.exists()
