"""A query log that already names each query's domain becomes one proposal per label (``labeling.services.run_from_labels``)."""

from __future__ import annotations

import io
import json

import pytest

from jobs.services import JobFailed
from labeling import proposals, services
from labeling.models import Assignment
from tests.support.hashing_encoder import HashingEncoder


@pytest.fixture
def hashing_encoder(monkeypatch):
    encoder = HashingEncoder()
    monkeypatch.setattr("labeling.services.get_encoder", lambda *a, **k: encoder)
    return encoder


def _import(rows: list[dict]) -> None:
    data = "\n".join(json.dumps(r) for r in rows).encode()
    services.import_queries(io.BytesIO(data), "log.jsonl", "log")
    services.embed_missing(source="log")


@pytest.mark.django_db
def test_each_label_becomes_a_proposal_holding_its_queries_and_promotes_to_an_expert(hashing_encoder):
    rows = [{"text": f"renew my driving licence {i}", "label": "cars"} for i in range(4)]
    rows += [{"text": f"when does my pension start {i}", "label": "money"} for i in range(3)]
    rows += [{"text": "what is the weather"}]  # no label: left unassigned
    _import(rows)

    run = services.run_from_labels("log")

    assert sorted(run.proposals.values_list("name", "size")) == [("cars", 4), ("money", 3)]
    assert run.n_topics == 2
    assert run.noise_share == pytest.approx(1 / 8)
    assert Assignment.objects.filter(run=run, proposal__isnull=True).get().query.text == "what is the weather"
    assert all(p.keywords and p.representatives for p in run.proposals.all())
    assert services.run_from_labels("log") == run  # the same queries: the same run

    experts = proposals.promote_run(run)
    assert sorted(e.slug for e in experts) == ["cars", "money"]


@pytest.mark.django_db
def test_a_log_with_fewer_than_two_labels_is_refused(hashing_encoder):
    _import([{"text": f"renew my driving licence {i}", "label": "cars"} for i in range(3)])
    with pytest.raises(JobFailed, match="at least two"):
        services.run_from_labels("log")
