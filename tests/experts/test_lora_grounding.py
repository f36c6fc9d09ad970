"""Grounded training examples (labeling.grounding): labelled questions answered from the expert's documents."""

from __future__ import annotations

import pytest

from experts.choices import ExampleSource
from experts.models import TrainingExample
from jobs.choices import JobStatus
from knowledge.ingest import ingest_files
from labeling.choices import ProposalStatus
from labeling.models import Assignment, ClusteringRun, Proposal, Query
from tests.factories import make_expert
from tests.support.hashing_encoder import HashingEncoder, use_encoder

pytestmark = pytest.mark.django_db


@pytest.fixture
def grounded_setup(monkeypatch, settings, tmp_path):
    from knowledge.stores import get_store

    enc = HashingEncoder()
    settings.EMBEDDING_MODEL = enc.name
    settings.QDRANT_URL, settings.QDRANT_PATH, settings.VAR_DIR = "", str(tmp_path / "qdrant"), tmp_path
    settings.EXTRACTIVE_MIN_SCORE = 0.2
    use_encoder(monkeypatch, enc)
    for module in ("labeling.grounding", "experts.generation.extractive"):
        monkeypatch.setattr(f"{module}.get_encoder", lambda *a, **k: enc)
    get_store.cache_clear()
    expert = make_expert("dmv", "DMV", chunk_size=300, chunk_overlap=50, public=False)
    ingest_files(expert, [
        ("renew.md", b"# Renewals\n\nRenew your driver license online before it expires. Renewal costs 64 dollars."),
        ("plates.md", b"# Plates\n\nOrder replacement licence plates at a service centre with the old plates."),
    ])
    run = ClusteringRun.objects.create(model=enc.name, eps=0.2, min_samples=3, n_experts=1, fingerprint="t")
    proposal = Proposal.objects.create(run=run, index=0, name="DMV", status=ProposalStatus.PROMOTED, expert=expert)
    for i, text in enumerate(["How do I renew my driver license online?", "Where do I order replacement plates?",
                              "how do I renew my driver license online?", "Zebra quantum violin?"]):
        q = Query.objects.create(text=text, text_hash=f"h{i}", row_hash=f"r{i}", source="test")
        Assignment.objects.create(run=run, query=q, topic=0, proposal=proposal)
    yield expert
    get_store().close()
    get_store.cache_clear()


def test_lora_grounded_examples_cite_the_expert_documents_and_skip_weak_ones(grounded_setup):
    from labeling.grounding import build_grounded_examples

    report = build_grounded_examples(grounded_setup)
    assert report == {"questions": 3, "created": 2, "duplicates": 0, "weak": 1, "gold": 0, "unsupported": 0,
                      "held_out_again": 0}  # the case-only duplicate is asked once
    renew = TrainingExample.objects.get(question__startswith="How do I renew")
    assert renew.source == ExampleSource.GROUNDED
    assert "[1]" in renew.answer
    assert "Renew your driver license online" in renew.answer
    assert renew.passages[0]["title"] == "Renewals"  # the cited passage is passage 1 of the prompt
    assert build_grounded_examples(grounded_setup)["duplicates"] == 2  # a rerun adds nothing


def test_lora_grounded_examples_run_as_a_job_from_the_console(grounded_setup, client, django_user_model, django_capture_on_commit_callbacks):
    from jobs.models import Job

    admin = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/experts/dmv/adapters/data/grounded/")
    job = Job.objects.get(kind="build_grounded_examples")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.result["created"] == 2


def test_lora_a_gold_answer_from_the_log_is_the_target_cited_to_the_passage_holding_it(grounded_setup):
    from labeling.grounding import build_grounded_examples

    gold = "Renewal costs 64 dollars."
    Query.objects.filter(text="Where do I order replacement plates?").update(answer="Bring the old plates to a service centre; plates cost 25 dollars.")
    Query.objects.filter(text="How do I renew my driver license online?").update(answer=gold)

    report = build_grounded_examples(grounded_setup)

    assert report == {"questions": 3, "created": 1, "duplicates": 0, "weak": 1, "gold": 1, "unsupported": 1, "held_out_again": 0}
    example = TrainingExample.objects.get(question__startswith="How do I renew")
    assert example.answer == f"{gold} [1]"  # the renewals passage ranks first for this question
    assert example.passages[0]["title"] == "Renewals"
    assert not TrainingExample.objects.filter(question__startswith="Where do I order").exists()  # its gold answer is not in the documents


def test_lora_a_question_the_source_holds_out_is_a_held_out_example_never_a_training_one(grounded_setup):
    from experts.choices import ExampleSplit
    from labeling.grounding import build_grounded_examples

    Query.objects.filter(text="How do I renew my driver license online?").update(split="train")
    Query.objects.filter(text="how do I renew my driver license online?").update(split="test")  # a copy held out: held out
    Query.objects.filter(text="Where do I order replacement plates?").update(split="train")

    assert build_grounded_examples(grounded_setup)["created"] == 2

    assert TrainingExample.objects.get(question__startswith="How do I renew").split == ExampleSplit.EVAL
    assert TrainingExample.objects.get(question__startswith="Where do I order").split == ExampleSplit.TRAIN


@pytest.mark.parametrize(("source", "split"), [("test", "eval"), ("VAL", "eval"), ("validation", "eval"), ("dev", "eval"),
                                               ("train", "train"), ("", ""), ("holdout-b", "")])
def test_lora_the_source_split_maps_to_the_example_split(source, split):
    from labeling.grounding import example_split

    assert example_split(source) == split


def test_lora_a_grounded_example_made_for_training_before_the_source_held_it_out_is_held_out_on_the_next_pass(grounded_setup):
    from experts.choices import ExampleSplit
    from labeling.grounding import build_grounded_examples

    Query.objects.update(split="train")
    build_grounded_examples(grounded_setup)
    assert set(TrainingExample.objects.values_list("split", flat=True)) == {ExampleSplit.TRAIN}
    Query.objects.filter(text="Where do I order replacement plates?").update(split="test")  # as an earlier pass that ignored it saw it

    report = build_grounded_examples(grounded_setup)

    assert report["held_out_again"] == 1
    assert TrainingExample.objects.get(question__startswith="Where do I order").split == ExampleSplit.EVAL
    assert TrainingExample.objects.get(question__startswith="How do I renew").split == ExampleSplit.TRAIN
