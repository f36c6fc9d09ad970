"""A team that uploaded each department's documents first gets one proposal per department, seeded by them."""

from __future__ import annotations

import io

import numpy as np
import pytest

from experts.models import Expert
from knowledge.indexing import index_pending
from knowledge.ingest import upsert_document
from knowledge.parsers import DocumentInput
from labeling import proposals, services
from labeling.ml.seeding import NO_EVIDENCE, by_documents, conversation_evidence
from labeling.models import Assignment
from tests.factories import make_expert
from tests.support.hashing_encoder import HashingEncoder, use_encoder

pytestmark = pytest.mark.django_db

DOCUMENTS = {
    "motor": ("Motor Vehicles", "Renew your driver licence online. A licence renewal needs your licence number and a photo. "
                                "Register a vehicle and pay the vehicle registration fee at the counter."),
    "pension": ("Pensions", "Your state pension starts at pension age. Apply for your pension four months before pension age. "
                            "Pension payments arrive every four weeks into your bank account."),
}
# Worded so that the questions alone do not split by department: "online", "apply", "how" and "when" cross over.
QUESTIONS = {
    "motor": ["how do I renew my licence online", "when does my driver licence need renewal", "apply for a vehicle registration",
              "how much is the registration fee for my vehicle", "can I renew a licence without a photo", "where do I register a vehicle"],
    "pension": ["how do I apply for my state pension online", "when do pension payments arrive", "what is my pension age",
                "can I apply for a pension four months early", "how often are pension payments made", "when does my state pension start"],
}


@pytest.fixture
def hashing(monkeypatch, settings, tmp_path):
    """The hashing encoder in the knowledge code and discovery; a fresh store under tmp_path."""
    from knowledge.stores import get_store

    encoder = HashingEncoder()
    settings.EMBEDDING_MODEL = encoder.name
    settings.QDRANT_URL, settings.QDRANT_PATH, settings.VAR_DIR = "", str(tmp_path / "qdrant"), tmp_path
    use_encoder(monkeypatch, encoder)
    monkeypatch.setattr("labeling.services.get_encoder", lambda *a, **k: encoder)
    get_store.cache_clear()
    yield encoder
    get_store().close()
    get_store.cache_clear()


def departments_with_documents() -> dict[str, Expert]:
    experts = {}
    for slug, (name, text) in DOCUMENTS.items():
        expert = make_expert(slug, name, description=f"{name}: what the office does", chunk_size=300, chunk_overlap=50, public=False)
        upsert_document(expert, DocumentInput(external_id=slug, title=name, text=text))
        index_pending(expert)
        experts[slug] = expert
    return experts


def import_log() -> None:
    rows = "\n".join(q for questions in QUESTIONS.values() for q in questions)
    services.import_queries(io.BytesIO(("text\n" + rows + "\n").encode()), "log.csv", "log")
    services.embed_missing(source="log")


def test_each_question_goes_to_the_department_whose_documents_match_it(hashing):
    experts = departments_with_documents()
    import_log()

    run = services.cluster_queries(source="log", min_samples=2)

    by_name = {p.name: p for p in run.proposals.all()}
    assert set(by_name) == {"Motor Vehicles", "Pensions"}
    for slug, questions in QUESTIONS.items():
        proposal = by_name[experts[slug].name]
        assert proposal.expert == experts[slug]
        assert set(Assignment.objects.filter(run=run, proposal=proposal).values_list("query__text", flat=True)) == set(questions)


def test_promoting_a_seeded_run_labels_the_questions_into_the_existing_experts(hashing):
    experts = departments_with_documents()
    import_log()
    run = services.cluster_queries(source="log", min_samples=2)

    promoted = proposals.promote_run(run)

    assert sorted(e.pk for e in promoted) == sorted(e.pk for e in experts.values())
    assert Expert.objects.count() == 2
    assert Expert.objects.get(slug="motor").description == "Motor Vehicles: what the office does"


def test_asking_for_another_number_of_experts_clusters_the_questions_alone(hashing):
    departments_with_documents()
    import_log()

    run = services.cluster_queries(source="log", min_samples=2, n_experts=3)

    assert run.proposals.count() == 3
    assert not run.proposals.filter(expert__isnull=False).exists()


def test_new_documents_make_a_new_run_not_the_earlier_one(hashing):
    experts = departments_with_documents()
    import_log()
    first = services.cluster_queries(source="log", min_samples=2)

    upsert_document(experts["pension"], DocumentInput(external_id="more", title="Pensions", text="Pension credit tops up a low income."))
    index_pending(experts["pension"])

    assert services.cluster_queries(source="log", min_samples=2).pk != first.pk


def test_a_question_without_evidence_is_left_out_and_the_best_match_wins():
    evidence = np.array([[0.2, 0.7], [np.nan, 0.1], [np.nan, np.nan], [0.9, 0.3]])
    assert by_documents(evidence).tolist() == [1, 1, NO_EVIDENCE, 0]
    with pytest.raises(ValueError, match="at least one department"):
        by_documents(np.zeros((3, 0)))


def test_a_conversation_is_decided_by_all_its_questions():
    # Rows 0 and 2 open conversations; row 1 follows row 0, row 3 follows row 2. Row 1's evidence outweighs its opener's.
    evidence = np.array([[0.50, 0.45], [0.10, 0.90], [0.9, 0.2], [np.nan, np.nan]])
    means = conversation_evidence(evidence, [0, 0, 2, 2], [0, 2])
    assert np.allclose(means, [[0.30, 0.675], [0.9, 0.2]])
    assert by_documents(means).tolist() == [1, 0]


def import_conversations() -> None:
    """The log with conversations: in c-1 a question about pensions follows two about licences."""
    rows = [(q, f"m-{i}") for i, q in enumerate(QUESTIONS["motor"])] + [(q, f"p-{i}") for i, q in enumerate(QUESTIONS["pension"])]
    rows += [("renew my licence online with a photo", "c-1"), ("my driver licence renewal number", "c-1"), ("and when do pension payments arrive", "c-1")]
    lines = "\n".join(f"{text},{conversation},2026-01-01T00:0{k % 10}:00Z" for k, (text, conversation) in enumerate(rows))
    services.import_queries(io.BytesIO(("text,conversation,timestamp\n" + lines + "\n").encode()), "log.csv", "log")
    services.embed_missing(source="log")


def test_review_flags_a_question_whose_documents_point_to_another_expert(hashing, django_user_model):
    from rest_framework.test import APIClient

    from labeling import selectors

    experts = departments_with_documents()
    import_conversations()
    run = services.cluster_queries(source="log", min_samples=2)

    flagged = Assignment.objects.get(run=run, query__text="and when do pension payments arrive")
    assert flagged.proposal.expert == experts["motor"]  # its conversation is about licences
    assert flagged.points_elsewhere
    assert flagged.documents_point_to == experts["pension"]
    assert list(selectors.pointing_elsewhere(run)) == [flagged]
    review = selectors.run_review(run)
    assert {row.proposal.name: row.elsewhere for row in review.rows} == {"Motor Vehicles": 1, "Pensions": 0}

    admin = django_user_model.objects.create_user("admin", is_staff=True)
    api = APIClient()
    api.force_authenticate(admin)
    page = api.get(f"/api/v1/discovery/proposals/{flagged.proposal_id}/queries").json()
    assert page["queries"][0]["text"] == "and when do pension payments arrive"  # flagged first
    assert page["queries"][0]["documents_point_to"] == "pension"
    assert {q["documents_point_to"] for q in page["queries"][1:]} == {None}

    # Moved to the proposal its documents name, it is no longer flagged.
    pensions = run.proposals.get(expert=experts["pension"])
    Assignment.objects.filter(pk=flagged.pk).update(proposal=pensions)
    assert not selectors.pointing_elsewhere(run).exists()


def test_once_a_run_is_promoted_new_runs_look_for_topics_again(hashing):
    departments_with_documents()
    import_log()
    proposals.promote_run(services.cluster_queries(source="log", min_samples=2))

    again = services.cluster_queries(source="log", min_samples=2, n_experts=2)

    assert not again.proposals.filter(expert__isnull=False).exists()
    assert not Assignment.objects.filter(run=again, documents_point_to__isnull=False).exists()
