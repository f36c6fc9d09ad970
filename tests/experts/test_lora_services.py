"""Training data, adapter training jobs and versions (LoRA) with the tiny LM, tasks run eagerly."""

from __future__ import annotations

import json

import pytest
import torch

from experts import services
from experts.choices import ExampleSource, ExampleSplit, VersionStatus
from experts.ml.lora_errors import LoraError
from experts.models import ExpertVersion, TrainingExample
from jobs.choices import JobStatus
from jobs.models import Job
from jobs.services import JobReporter, run_job
from tests.factories import make_expert

pytestmark = pytest.mark.django_db

FAST = {"rank": 4, "alpha": 8, "dropout": 0.0, "epochs": 1, "max_steps": 4, "batch_size": 2, "max_length": 96,
        "learning_rate": 0.05, "checkpoint_steps": 2, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture
def expert(db):
    return make_expert("dmv", "DMV", public=False)


@pytest.fixture
def train(django_capture_on_commit_callbacks):
    """Start a training and run it (tasks are eager once the transaction's callbacks run)."""
    def start(expert, params, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            job = services.start_adapter_training(expert, params, **kwargs)
        job.refresh_from_db()
        return job

    return start


@pytest.fixture
def lora_settings(settings, tiny_lm_dir, tmp_path, monkeypatch):
    settings.BASE_MODEL = str(tiny_lm_dir)
    settings.ADAPTER_DIR = tmp_path / "adapters"
    monkeypatch.setattr(services, "MIN_EXAMPLES", 4)
    settings.LORA_TRAINING_QUEUE = "cpu"
    return settings


def _jsonl(rows) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def _fill(expert, n=8):
    rows = [{"question": f"How do I renew licence type {i}?", "answer": f"Renew type {i} online at the DMV [1].", "split": "train"} for i in range(n)]
    rows[0]["split"] = "eval"
    return services.import_examples(expert, _jsonl(rows))


def test_lora_import_stores_every_line_and_skips_duplicates(expert):
    report = _fill(expert, 8)
    assert report.created == 8
    again = services.import_examples(expert, _jsonl([{"question": "How do I renew licence type 1?", "answer": "Renew type 1 online at the DMV [1]."}]))
    assert (again.created, again.duplicates) == (0, 1)
    assert TrainingExample.objects.filter(expert=expert, source=ExampleSource.IMPORTED).count() == 8
    assert TrainingExample.objects.get(question__endswith="type 0?").split == ExampleSplit.EVAL


def test_lora_import_of_a_bad_file_reports_each_line_and_writes_nothing(expert):
    data = b'{"question": "ok?", "answer": "fine"}\nnot json\n{"question": "q", "answer": "  "}\n[1]\n{"question": "q", "answer": "a", "split": "dev"}'
    with pytest.raises(services.TrainingDataError) as info:
        services.import_examples(expert, data)
    assert [e.split(":")[0] for e in info.value.errors] == ["line 2", "line 3", "line 4", "line 5"]
    assert "'answer' must be a non-empty string" in info.value.errors[1]
    assert TrainingExample.objects.count() == 0


def test_lora_held_out_split_is_deterministic():
    fps = [services.example_fingerprint(f"q{i}", "a") for i in range(400)]
    splits = [services.held_out_split(f) for f in fps]
    assert splits == [services.held_out_split(f) for f in fps]
    assert 20 <= splits.count(ExampleSplit.EVAL) <= 60


def test_lora_training_is_refused_before_queueing_when_inputs_are_bad(expert, lora_settings, tmp_path):
    with pytest.raises(LoraError, match="at least 4"):
        services.start_adapter_training(expert, FAST)
    _fill(expert)
    lora_settings.BASE_MODEL = str(tmp_path / "no-such-model")
    with pytest.raises(LoraError, match="does not exist"):
        services.start_adapter_training(expert, FAST)
    assert not Job.objects.exists()


def test_lora_training_job_makes_a_candidate_version_with_held_out_figures(expert, lora_settings, train):
    _fill(expert)
    job = train(expert, FAST)
    assert job.status == JobStatus.SUCCEEDED, job.error
    version = ExpertVersion.objects.get(expert=expert)
    assert version.status == VersionStatus.CANDIDATE
    assert (version.n_train, version.n_eval) == (7, 1)
    assert version.metrics["eval_loss"] > 0
    assert version.metrics["eval_perplexity"] == pytest.approx(torch.tensor(version.metrics["eval_loss"]).exp().item(), rel=1e-3)
    assert (version.adapter_path.endswith("dmv/v1"))
    assert (lora_settings.ADAPTER_DIR / "dmv" / "v1" / "adapter_config.json").is_file()
    assert [p["step"] for p in job.result["loss_curve"]] == [1, 2, 3, 4]
    assert version.data_fingerprint == services.data_fingerprint(expert)


class WorkerKilled(BaseException):
    """Stands in for a worker process dying mid-training (nothing in the process handles it)."""


class DiesAtStep(JobReporter):
    def progress(self, fraction: float, message: str = "") -> None:
        super().progress(fraction, message)
        if message.startswith("step 2/"):
            raise WorkerKilled


def test_lora_training_job_resumes_after_a_worker_restart(expert, lora_settings):
    _fill(expert)
    parsed = services.check_training_inputs(expert, FAST)
    job = Job.objects.create(kind="train_adapter", key="train_adapter:dmv", title="t", params={"expert": "dmv", "lora": parsed.as_dict()},
                             status=JobStatus.RUNNING)
    with pytest.raises(WorkerKilled):
        services.train_adapter_job(job, DiesAtStep(job.pk))
    assert ExpertVersion.objects.get(expert=expert).status == VersionStatus.TRAINING
    Job.objects.filter(pk=job.pk).update(status=JobStatus.QUEUED)  # what the jobs sweeper does once the lease runs out
    finished = run_job(job.pk, services.train_adapter_job)  # acks_late redelivers the task to a new worker
    assert finished.status == JobStatus.SUCCEEDED, finished.error
    assert finished.result["resumed_from"] == 2
    assert [p["step"] for p in finished.result["loss_curve"]] == [1, 2, 3, 4]
    assert ExpertVersion.objects.filter(expert=expert).count() == 1


class OutOfMemoryAtStep1(JobReporter):
    def progress(self, fraction: float, message: str = "") -> None:
        if message.startswith("step 1/"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_lora_out_of_memory_fails_the_job_and_the_active_version_keeps_serving(expert, lora_settings, monkeypatch):
    _fill(expert)
    serving = ExpertVersion.objects.create(expert=expert, version=1, status=VersionStatus.ACTIVE, system_prompt="Be brief.")
    parsed = services.check_training_inputs(expert, FAST)
    job = Job.objects.create(kind="train_adapter", key="k", title="t", params={"expert": "dmv", "lora": parsed.as_dict()})
    monkeypatch.setattr("jobs.services.JobReporter", OutOfMemoryAtStep1)
    finished = run_job(job.pk, services.train_adapter_job)
    assert finished.status == JobStatus.FAILED
    assert "out of memory" in finished.error
    assert "keeps serving" in finished.error
    failed = ExpertVersion.objects.get(expert=expert, version=2)
    assert failed.status == VersionStatus.FAILED
    assert "batch_size" in failed.notes
    serving.refresh_from_db()
    assert serving.status == VersionStatus.ACTIVE
    assert failed.system_prompt == "Be brief."  # a training carries the serving prompt


def test_lora_activate_and_roll_back_versions(expert, lora_settings, train):
    _fill(expert)
    train(expert, FAST)
    v1 = ExpertVersion.objects.get(expert=expert, version=1)
    services.activate_version(v1)
    v2 = services.save_prompt(expert, "Answer like a DMV clerk.", "(source {index})")
    assert (v2.version, v2.adapter_path, v2.status) == (2, v1.adapter_path, VersionStatus.CANDIDATE)
    services.activate_version(v2)
    v1.refresh_from_db()
    assert v1.status == VersionStatus.ARCHIVED
    services.activate_version(v1)  # roll back
    assert list(ExpertVersion.objects.filter(expert=expert, status=VersionStatus.ACTIVE)) == [v1]
    with pytest.raises(services.VersionError, match="exactly once"):
        services.save_prompt(expert, "x", "no marker")
    failed = ExpertVersion.objects.create(expert=expert, version=9, status=VersionStatus.FAILED)
    with pytest.raises(services.VersionError, match="only trained versions"):
        services.activate_version(failed)


def test_lora_an_adapter_for_another_base_model_cannot_be_activated(expert, lora_settings, tmp_path, train):
    _fill(expert)
    train(expert, FAST)
    lora_settings.BASE_MODEL = str(tmp_path)
    with pytest.raises(services.VersionError, match="trained on"):
        services.activate_version(ExpertVersion.objects.get(expert=expert, version=1))


def test_lora_transformers_backend_is_chosen_by_setting_and_warms_up_the_busiest_adapters(expert, lora_settings, train):
    from experts.generation.registry import get_generator, warm_up_hottest
    from experts.generation.transformers import TransformersGenerator

    _fill(expert)
    train(expert, {**FAST, "max_steps": 1})
    services.activate_version(ExpertVersion.objects.get(expert=expert, version=1))
    other = make_expert("ssa", "SSA", public=False)
    lora_settings.GENERATOR = "transformers"
    lora_settings.ADAPTER_CACHE_SIZE = 1
    get_generator.cache_clear()
    try:
        assert isinstance(get_generator(), TransformersGenerator)
        assert warm_up_hottest(lambda: {"dmv": 5, other.slug: 50}) == ["dmv-v1"]
        with pytest.raises(ValueError, match="known backends: extractive, transformers, vllm"):
            get_generator("nope")
    finally:
        get_generator.cache_clear()


def test_lora_a_version_that_beats_the_base_model_on_its_held_out_answers_is_activated(expert, lora_settings, train, monkeypatch):
    lora_settings.GENERATOR_MAX_TOKENS = 12
    monkeypatch.setattr(services, "DECODING", "free")  # the examples carry no passages: only a written answer can say it
    # Every answer is the same sentence: an adapter can learn it, the random base model cannot say it.
    rows = [{"question": f"How do I renew licence type {i}?", "answer": "Renew online.", "split": "eval" if i < 10 else "train"} for i in range(18)]
    services.import_examples(expert, _jsonl(rows))
    job = train(expert, {**FAST, "max_steps": 60, "max_length": 400}, activate_if_better=True)
    assert job.status == JobStatus.SUCCEEDED, job.error
    version = ExpertVersion.objects.get(expert=expert)
    assert version.metrics["held_out_f1"] == 1.0
    assert version.metrics["base_held_out_f1"] < 0.5
    assert version.metrics["beats_base"] is True
    assert version.metrics["held_out_n"] == 10
    assert version.metrics["f1_difference"] > 0.5
    assert version.metrics["f1_difference_se"] is not None
    assert version.metrics["gate"] == "answers better than the base model"
    assert job.result["activated"] is True
    assert version.status == VersionStatus.ACTIVE


def test_lora_a_version_that_does_not_beat_the_base_model_stays_a_candidate(expert, lora_settings, train, monkeypatch):
    lora_settings.GENERATOR_MAX_TOKENS = 8
    monkeypatch.setattr(services, "GATE_MIN_HELD_OUT", 1)  # judged on _fill's one held-out question
    _fill(expert)
    job = train(expert, FAST, activate_if_better=True)
    assert job.status == JobStatus.SUCCEEDED, job.error
    version = ExpertVersion.objects.get(expert=expert)
    assert version.metrics["beats_base"] is False  # four steps of a random model answer nothing right
    assert job.result["activated"] is False
    assert version.status == VersionStatus.CANDIDATE


def test_lora_a_version_judged_on_too_few_held_out_questions_is_left_for_a_person(expert, lora_settings, train, monkeypatch):
    lora_settings.GENERATOR_MAX_TOKENS = 12
    monkeypatch.setattr(services, "DECODING", "free")
    rows = [{"question": f"How do I renew licence type {i}?", "answer": "Renew online.", "split": "eval" if i < 2 else "train"} for i in range(10)]
    services.import_examples(expert, _jsonl(rows))
    job = train(expert, {**FAST, "max_steps": 60, "max_length": 400}, activate_if_better=True)
    assert job.status == JobStatus.SUCCEEDED, job.error
    version = ExpertVersion.objects.get(expert=expert)
    assert version.metrics["held_out_f1"] == 1.0  # better on both questions, but two questions prove little
    assert version.metrics["beats_base"] is None
    assert version.metrics["gate"].startswith("not judged: 2 held-out questions, fewer than the 10")
    assert job.result["activated"] is False
    assert version.status == VersionStatus.CANDIDATE
    assert "not judged: 2 held-out questions" in Job.objects.get(pk=job.pk).log


@pytest.mark.parametrize(("mine", "base", "losses", "beats", "gate"), [
    ([1.0, 1.0, 0.5], [0.5, 0.5, 0.5], (1.0, 2.0), True, "answers better than the base model"),
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], (1.0, 2.0), False, "answers no better than the base model"),
    ([1.0, 0.5, 0.5], [0.5, 0.5, 0.5], (1.0, 2.0), False, "answers better by 0.167, within 1 standard error (0.167)"),  # one answer decides
    ([1.0, 1.0, 0.5], [0.5, 0.5, 0.5], (2.0, 1.0), False, "answers better, but its held-out loss is not lower"),
    ([1.0, 0.5], [0.5, 0.5], (1.0, 2.0), None, "not judged: 2 held-out questions, fewer than the 3"),
])
def test_the_answer_gate_reads_the_paired_scores_and_needs_enough_questions(mine, base, losses, beats, gate):
    verdict = services._paired_gate(mine, base, *losses, minimum=3)
    assert verdict["beats_base"] is beats
    assert verdict["gate"].startswith(gate)
    assert verdict["held_out_n"] == len(mine)
    assert verdict["f1_difference"] == pytest.approx(sum(mine) / len(mine) - sum(base) / len(base), abs=1e-5)
