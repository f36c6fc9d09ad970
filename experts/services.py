"""Creating and changing experts."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.text import slugify

from jobs.models import Job
from jobs.services import JobFailed, JobReporter, enqueue_once
from sbcommon.hashing import text_hash

from .choices import ExampleSource, ExampleSplit, VersionStatus
from .ml.answer_metrics import paired_difference
from .ml.extractive import Passage
from .ml.loading import check_adapter, resolve_base_model
from .ml.lora import MIN_EXAMPLES, LoraParams, last_checkpoint_step, train_lora
from .ml.lora_errors import LoraError
from .ml.lora_examples import Example, check_examples
from .ml.prompting import DEFAULT_CITATION_FORMAT, SHOWN_PASSAGES, STOP_AT_PARAGRAPH, validate_citation_format
from .ml.selection import DECODING, SHORTLIST
from .models import Expert, ExpertVersion, TrainingExample
from .selectors import clear_serving_caches, serving_version

# The share of an expert's examples held out where the imported log does not say (by a stable hash of each, so a
# retraining never leaks them): not a tuned figure, a tenth leaves most for training and some to judge.
EVAL_FRACTION = 0.1
# The activation gate judges an adapter on at least GATE_MIN_HELD_OUT held-out questions (with fewer a person
# decides) and needs its mean F1 gain over the base model to exceed GATE_MIN_SE standard errors of the paired
# difference. Rules, not tuned figures: on fewer than 10 questions one answer moves the mean F1 by 0.1 or more, and at
# 1 standard error a single answer of the held-out set that changes for the better never decides (its gain equals
# its standard error; docs/CONFIGURATION.md has the demo adapter it would have stopped).
GATE_MIN_HELD_OUT = 10
GATE_MIN_SE = 1.0


def _set_flag(expert: Expert, field: str, on: bool, user: Any, action: str) -> Expert:
    """Set the boolean ``field`` of ``expert`` to ``on`` (audited as ``action`` when it changes)."""
    from audit.services import record

    if getattr(expert, field) != on:
        Expert.objects.filter(pk=expert.pk).update(**{field: on})
        setattr(expert, field, on)
        clear_serving_caches()  # this process at once; others within SERVING_CACHE_TTL_S
        record(action, actor=user, obj=expert, changes={field: on})
    return expert


def set_fallback(expert: Expert, on: bool, user: Any = None) -> Expert:
    """Make ``expert`` answer the questions the router is not sure about (or stop it); audited.

    More than one fallback may be set; the router takes the first by slug (``selectors.fallback_slugs``).
    """
    return _set_flag(expert, "is_fallback", on, user, "expert.fallback")


def set_public(expert: Expert, on: bool, user: Any = None) -> Expert:
    """Let anyone ask ``expert``, signed in or not (or only its team and staff again); audited.

    Public opens the expert to questions only: its documents, traces and pages stay its team's.
    """
    return _set_flag(expert, "public", on, user, "expert.public")


@transaction.atomic
def upsert_expert(slug: str, name: str, description: str = "", keywords: list[str] | None = None, *, team: Any = None,
                  public: bool | None = None) -> tuple[Expert, bool]:
    """Create the expert ``slug`` or update its name, description and keywords; returns (expert, created).

    ``team`` (a group) owns a new expert; ``public`` (when given) sets whether anyone may ask it.
    """
    expert, created = Expert.objects.get_or_create(slug=slug, defaults={"name": name, "team": team})
    expert.name = name
    if public is not None:
        expert.public = public
    if description:
        expert.description = description
    if keywords is not None:
        expert.keywords = keywords
    expert.save()
    return expert, created


def slug_for(name: str) -> str:
    """The slug an expert named ``name`` gets (stable: the same name gives the same slug)."""
    return slugify(name)[:64] or "expert"


# --- training data (issue 6) ------------------------------------------------------------------

MAX_EXAMPLE_CHARS = 20000


class TrainingDataError(ValueError):
    """Training data that cannot be stored; ``errors`` lists every problem found ("line 3: ...")."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        shown = "; ".join(errors[:5]) + (f"; and {len(errors) - 5} more" if len(errors) > 5 else "")
        super().__init__(f"nothing was imported: {shown}")


@dataclass
class ImportReport:
    """What an import stored: new examples, exact duplicates skipped."""

    created: int = 0
    duplicates: int = 0
    eval: int = 0


def _normalise(text: str) -> str:
    return " ".join(text.split())


def example_fingerprint(question: str, answer: str) -> str:
    """The identity of a question/answer pair (whitespace-insensitive): the same pair is stored once."""
    return text_hash(_normalise(question).lower() + "\n\u241e\n" + _normalise(answer))


def held_out_split(fingerprint: str) -> str:
    """``eval`` for a stable ``EVAL_FRACTION`` of examples (by their fingerprint), ``train`` for the rest.

    Deterministic: the same pair always lands in the same split, so a re-import or a retraining
    never leaks held-out examples into training.
    """
    bucket = int(fingerprint[:8], 16) / 0xFFFFFFFF
    return ExampleSplit.EVAL if bucket < EVAL_FRACTION else ExampleSplit.TRAIN


def _check_pair(question: Any, answer: Any, split: Any) -> list[str]:
    problems = []
    for name, value in (("question", question), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            problems.append(f"'{name}' must be a non-empty string")
        elif len(value) > MAX_EXAMPLE_CHARS:
            problems.append(f"'{name}' is longer than {MAX_EXAMPLE_CHARS} characters")
    if split not in (None, "", *ExampleSplit.values):
        problems.append(f"'split' must be one of {', '.join(ExampleSplit.values)}, not {split!r}")
    return problems


def parse_examples_jsonl(data: bytes | str) -> list[dict[str, str]]:
    """Validate a JSONL file of ``{"question", "answer"[, "split"]}`` lines; every error reported by line.

    Raises:
        TrainingDataError: any bad line (nothing is returned, so nothing gets written).
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise TrainingDataError(["the file is not UTF-8 text"]) from None
    rows, errors = [], []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(obj, dict):
            errors.append(f"line {number}: expected an object with 'question' and 'answer'")
            continue
        problems = _check_pair(obj.get("question"), obj.get("answer"), obj.get("split"))
        errors.extend(f"line {number}: {p}" for p in problems)
        if not problems:
            rows.append({"question": obj["question"].strip(), "answer": obj["answer"].strip(), "split": obj.get("split") or ""})
    if not rows and not errors:
        errors.append("the file holds no examples")
    if errors:
        raise TrainingDataError(errors)
    return rows


@transaction.atomic
def add_example(
    expert: Expert, question: str, answer: str, *, split: str = "", passages: list[dict[str, Any]] | None = None,
    source: str = ExampleSource.REVIEWED, user: Any = None,
) -> tuple[TrainingExample, bool]:
    """Store one question/answer pair (or find the identical one); returns (example, created)."""
    problems = _check_pair(question, answer, split)
    if problems:
        raise TrainingDataError(problems)
    fingerprint = example_fingerprint(question, answer)
    return TrainingExample.objects.get_or_create(
        expert=expert,
        fingerprint=fingerprint,
        defaults={
            "question": question.strip(), "answer": answer.strip(), "passages": passages or [], "source": source,
            "split": split or held_out_split(fingerprint), "created_by": user if getattr(user, "pk", None) else None,
        },
    )


@transaction.atomic
def delete_example(expert: Expert, pk: int) -> bool:
    """Delete one of the expert's training examples; False when it does not exist (or is another expert's)."""
    deleted, _ = TrainingExample.objects.filter(expert=expert, pk=pk).delete()
    return bool(deleted)


def import_examples(expert: Expert, data: bytes | str, user: Any = None) -> ImportReport:
    """Import a JSONL file of examples: all of it, or nothing when any line is bad."""
    report = ImportReport()
    for row in parse_examples_jsonl(data):
        example, created = add_example(expert, row["question"], row["answer"], split=row["split"], source=ExampleSource.IMPORTED, user=user)
        report.created += created
        report.duplicates += not created
        report.eval += created and example.split == ExampleSplit.EVAL
    return report


# --- adapter training -------------------------------------------------------------------------


def default_training_params() -> dict[str, Any]:
    """The training form's starting values: ``LoraParams``' defaults, with QLoRA and bfloat16 as the settings say."""
    return LoraParams(qlora=settings.LORA_QLORA, bf16=settings.LORA_BF16).as_dict()


def training_queue() -> str:
    """``LORA_TRAINING_QUEUE``, else ``gpu`` when this process sees CUDA, else the training queue."""
    if settings.LORA_TRAINING_QUEUE:
        return settings.LORA_TRAINING_QUEUE
    import torch

    if torch.cuda.is_available():
        return "gpu"
    return settings.CELERY_TASK_ROUTES.get("*.train_*", {}).get("queue", "cpu")


def adapter_dir(expert: Expert, version: int) -> Path:
    return Path(settings.ADAPTER_DIR) / expert.slug / f"v{version}"


def current_prompt(expert: Expert) -> tuple[str, str]:
    """(system prompt, citation format) of the serving version, else of the latest one, else the defaults."""
    version = serving_version(expert.slug) or expert.versions.order_by("-version").first()
    if version is None:
        return "", DEFAULT_CITATION_FORMAT
    return version.system_prompt, version.citation_format


def prompt_passages() -> Callable[[str, list[Passage]], list[Passage]]:
    """``(question, passages) -> the passages a served model is shown`` (``generation.selecting.shown_passages``).

    Training examples get the same, so an adapter learns from prompts shaped like the ones it answers.
    """
    from .generation.base import GenerationRequest
    from .generation.selecting import shown_passages, shown_shape

    shape = shown_shape()
    return lambda question, passages: shown_passages(GenerationRequest(question=question, expert="", passages=passages), **shape)


def training_examples(expert: Expert) -> tuple[list[Example], list[Example]]:
    """The expert's examples as (train, held-out) lists, with its current prompt and the passages serving would show."""
    system_prompt, citation_format = current_prompt(expert)
    shown = prompt_passages()
    train, held_out = [], []
    for row in expert.training_examples.order_by("id"):
        passages = [Passage(text=p.get("text", ""), title=p.get("title", ""), url=p.get("url", ""), score=float(p.get("score", 1.0)))
                    for p in row.passages]
        example = Example(row.question, row.answer, shown(row.question, passages), system_prompt, citation_format,
                          whole=passages[:SHOWN_PASSAGES])
        (held_out if row.split == ExampleSplit.EVAL else train).append(example)
    return train, held_out


def data_fingerprint(expert: Expert) -> str:
    """A hash of exactly which examples (and splits) a training saw: the version's data snapshot."""
    rows = expert.training_examples.order_by("fingerprint").values_list("fingerprint", "split")
    return text_hash("\n".join(f"{f}:{s}" for f, s in rows))


def check_training_inputs(expert: Expert, params: dict[str, Any]) -> LoraParams:
    """Everything a training needs, checked before a job is queued (LoraError says what is wrong)."""
    parsed = LoraParams.from_dict(params)
    resolve_base_model(settings.BASE_MODEL)
    train, held_out = training_examples(expert)
    check_examples(train, min_examples=MIN_EXAMPLES)
    check_examples(held_out, min_examples=0)
    return parsed


def start_adapter_training(expert: Expert, params: dict[str, Any], user: Any = None, *, activate_if_better: bool = False) -> Job:
    """Validate, then queue one training of the expert's adapter (one at a time per expert).

    With ``activate_if_better`` the new version starts serving when it passes the answer gate
    (``answer_gate``); otherwise it stays a candidate for a person to activate.

    Raises:
        LoraError: bad parameters, a missing base model or unusable training data.
    """
    parsed = check_training_inputs(expert, params)
    from .tasks import train_adapter

    return enqueue_once(
        "train_adapter", f"train_adapter:{expert.slug}", f"Train the {expert.name} adapter",
        train_adapter.s().set(queue=training_queue()),
        params={"expert": expert.slug, "lora": parsed.as_dict(), "activate_if_better": activate_if_better}, user=user,
    )


def answer_gate(adapter_path: Path, held_out: list[Example], eval_loss: float | None, base_eval_loss: float | None) -> dict[str, Any]:
    """Whether an adapter answers its expert's held-out questions better than the bare base model.

    Both answer every held-out question the way serving does (``selection.DECODING``: the passage
    sentence each rates best, or greedy up to ``GENERATOR_MAX_TOKENS`` with the same stops); their mean
    token F1 against the held-out answers is compared (``answer_metrics.token_f1``), with the paired
    difference and its standard error. ``beats_base`` needs a higher F1, by more than
    ``GATE_MIN_SE`` standard errors of the paired difference, *and* a lower held-out loss, on at
    least ``GATE_MIN_HELD_OUT`` questions; it is None with fewer (then nothing is activated
    automatically: a person decides). ``gate`` says the verdict in words.
    """
    from .generation.extractive import scorer_spec
    from .generation.selecting import sentence_scorer
    from .ml.batch_generation import attach_adapters, held_out_f1_scores
    from .ml.loading import bf16_native, load_base
    from .ml.prompting import STOPS

    minimum = GATE_MIN_HELD_OUT
    if not held_out:
        return {"held_out_f1": None, "base_held_out_f1": None, "held_out_n": 0, "beats_base": None,
                "gate": f"not judged: no held-out questions (needs {minimum})"}
    import torch

    tokenizer, base = load_base(settings.BASE_MODEL, dtype=torch.bfloat16 if bf16_native() else None)
    model = attach_adapters(base, {"candidate": str(adapter_path)}, settings.BASE_MODEL)
    stops = STOPS + (("\n\n",) if STOP_AT_PARAGRAPH else ())
    kwargs: dict[str, Any] = {"max_new_tokens": int(settings.GENERATOR_MAX_TOKENS), "stop_strings": stops,
                              # as the serving backend will answer: vLLM chooses only where VLLM_SELECT says its server can
                              "select": DECODING == "select" and (settings.GENERATOR != "vllm" or settings.VLLM_SELECT)}
    if kwargs["select"]:
        kwargs["scorer"] = sentence_scorer(SHORTLIST, scorer_spec())
    mine, base_scores = (held_out_f1_scores(model, tokenizer, held_out, name, **kwargs) for name in ("candidate", None))
    return _paired_gate(mine, base_scores, eval_loss, base_eval_loss, minimum, GATE_MIN_SE)


def _paired_gate(mine: list[float], base: list[float], eval_loss: float | None, base_eval_loss: float | None, minimum: int,
                 min_se: float = 1.0) -> dict[str, Any]:
    """The gate's verdict on each held-out question's F1 with the adapter (``mine``) and without (``base``)."""
    n = len(mine)
    f1, base_f1 = statistics.fmean(mine), statistics.fmean(base)
    gain, se = paired_difference(mine, base)
    better_loss = eval_loss is not None and base_eval_loss is not None and eval_loss < base_eval_loss
    clear = se is None or gain > min_se * se  # a gain within its noise, one changed answer say, is not a win
    if n < minimum:
        beats, gate = None, f"not judged: {n} held-out question{'s' if n != 1 else ''}, fewer than the {minimum} the gate needs; a person decides"
    elif f1 <= base_f1:
        beats, gate = False, "answers no better than the base model"
    elif not clear:
        beats, gate = False, (f"answers better by {gain:.3f}, within {min_se:g} standard error{'s' if min_se != 1 else ''} ({se:.3f}) "
                              "of the difference: not clearly better than the base model")
    elif not better_loss:
        beats, gate = False, "answers better, but its held-out loss is not lower"
    else:
        beats, gate = True, "answers better than the base model"
    return {"held_out_f1": _round(f1), "base_held_out_f1": _round(base_f1), "held_out_n": n, "f1_difference": _round(gain),
            "f1_difference_se": _round(se), "beats_base": beats, "gate": gate}


def _training_version(expert: Expert, job: Job, params: LoraParams) -> ExpertVersion:
    """This job's version row: created on the first run, found again when the job is resumed."""
    with transaction.atomic():
        Expert.objects.select_for_update().filter(pk=expert.pk).first()
        version = ExpertVersion.objects.filter(expert=expert, job=job).first()
        if version is None:
            number = (expert.versions.aggregate(m=Max("version"))["m"] or 0) + 1
            system_prompt, citation_format = current_prompt(expert)
            version = ExpertVersion.objects.create(
                expert=expert, version=number, job=job, status=VersionStatus.TRAINING, base_model=settings.BASE_MODEL,
                system_prompt=system_prompt, citation_format=citation_format, training_params=params.as_dict(),
            )
        elif version.status != VersionStatus.TRAINING:
            version.status = VersionStatus.TRAINING
            version.save(update_fields=["status"])
    return version


def train_adapter_job(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """The training job: train, evaluate, save the adapter, record a candidate ExpertVersion.

    A rerun of the same job (a worker restart) finds its version row and its checkpoint folder and
    continues from the last checkpoint. Whatever happens, the active version keeps serving: the new
    one is a candidate, activated by a person, or by this job when it was asked to
    (``activate_if_better``) and the adapter passes ``answer_gate``.
    """
    expert = Expert.objects.filter(slug=job.params.get("expert")).first()
    if expert is None:
        raise JobFailed(f"expert {job.params.get('expert')!r} no longer exists")
    try:
        params = LoraParams.from_dict(job.params.get("lora", {}))
    except LoraError as exc:
        raise JobFailed(str(exc)) from None
    version = _training_version(expert, job, params)
    train, held_out = training_examples(expert)
    fingerprint = data_fingerprint(expert)
    out = adapter_dir(expert, version.version)
    work = Path(settings.ADAPTER_DIR) / expert.slug / ".work" / f"job-{job.pk}"
    resumed = last_checkpoint_step(work)
    reporter.log(f"training v{version.version} on {len(train)} examples ({len(held_out)} held out), base {settings.BASE_MODEL}"
                 + (f", resuming from step {resumed}" if resumed else ""))
    curve_every = 1

    def on_step(step: int, total: int, loss: float) -> None:
        nonlocal curve_every
        curve_every = max(1, total // 200)
        reporter.progress(0.02 + 0.93 * step / total, f"step {step}/{total}, loss {loss:.4f}")
        if step % curve_every == 0 or step == total:
            _record_curve(job.pk, version.version, step, loss)

    try:
        result = train_lora(settings.BASE_MODEL, train, held_out, params, out, work, on_step=on_step,
                            min_examples=MIN_EXAMPLES, threads=settings.TORCH_THREADS)
    except LoraError as exc:
        _fail_version(version, str(exc))
        raise JobFailed(f"{exc} (the active version keeps serving)") from None
    except Exception as exc:
        _fail_version(version, f"{exc.__class__.__name__}: {exc}")
        raise
    metrics = {
        "eval_loss": _round(result.eval_loss), "eval_perplexity": _round(result.eval_perplexity),
        "train_loss": _round(result.train_loss), "steps": result.steps, "base_eval_loss": _round(result.base_eval_loss),
    }
    reporter.progress(0.96, "answering the held-out questions with and without the adapter")
    metrics.update(answer_gate(out, held_out, result.eval_loss, result.base_eval_loss))
    ExpertVersion.objects.filter(pk=version.pk).update(
        status=VersionStatus.CANDIDATE, adapter_path=str(out), data_fingerprint=fingerprint, n_train=len(train),
        n_eval=len(held_out), metrics={**metrics, "loss_curve": result.loss_curve}, knowledge_snapshot=_knowledge_snapshot(expert),
    )
    reporter.log(f"v{version.version} trained: held-out loss {metrics['eval_loss']} (base {metrics['base_eval_loss']}), "
                 f"answer F1 {metrics['held_out_f1']} (base {metrics['base_held_out_f1']})")
    activated = False
    if job.params.get("activate_if_better"):
        if metrics["beats_base"]:
            activate_version(ExpertVersion.objects.get(pk=version.pk))
            activated = True
            reporter.log(f"v{version.version} beats the base model on its held-out questions: activated")
        else:
            reporter.log(f"v{version.version} {metrics['gate']}: not activated, the current version keeps serving")
    return {"expert": expert.slug, "version": version.version, **metrics, "activated": activated, "loss_curve": result.loss_curve,
            "resumed_from": result.resumed_from}


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 5)


def _record_curve(job_id: int, version: int, step: int, loss: float) -> None:
    """Append a point to the job row's loss curve (``result.loss_curve``) while it runs, for the console."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        result = dict(job.result or {})
        curve = [p for p in result.get("loss_curve", []) if p["step"] < step]
        result.update(version=version, loss_curve=[*curve, {"step": step, "loss": round(loss, 5)}])
        job.result = result
        job.save(update_fields=["result"])


def _fail_version(version: ExpertVersion, reason: str) -> None:
    ExpertVersion.objects.filter(pk=version.pk).update(status=VersionStatus.FAILED, notes=reason[:2000])


def _knowledge_snapshot(expert: Expert) -> str:
    """The knowledge base's state at training time: its last change (documents are grounded against it)."""
    kb = getattr(expert, "knowledge_base", None)  # the knowledge app's one-to-one row; missing before the first index
    return kb.updated_at.isoformat() if kb is not None and kb.updated_at else ""


# --- versions ---------------------------------------------------------------------------------


class VersionError(ValueError):
    """A version change that is not allowed (the message says why)."""


@transaction.atomic
def activate_version(version: ExpertVersion, user: Any = None) -> ExpertVersion:
    """Make ``version`` the expert's serving version; the previous one is archived (roll back = activate it again).

    Only trained versions with their adapter folder present (or prompt-only versions) can serve,
    and an adapter must have been trained on the base model this platform runs.
    """
    version = ExpertVersion.objects.select_for_update().get(pk=version.pk)
    if version.status == VersionStatus.ACTIVE:
        return version
    if version.status not in (VersionStatus.CANDIDATE, VersionStatus.ARCHIVED):
        raise VersionError(f"v{version.version} is {version.get_status_display().lower()}; only trained versions can serve")
    if version.adapter_path:
        if not Path(version.adapter_path).is_dir():
            raise VersionError(f"the adapter of v{version.version} is gone from {version.adapter_path}")
        try:
            check_adapter(version.adapter_path, settings.BASE_MODEL)
        except LoraError as exc:
            raise VersionError(str(exc)) from None
        if settings.GENERATOR == "vllm":
            # vLLM must have the adapter before requests name it; if it cannot, the current version keeps serving.
            from .generation.base import AdapterRef, GenerationError
            from .generation.vllm import register_for_serving

            ref = AdapterRef(expert=version.expert.slug, name=version.adapter_name, path=version.adapter_path, base_model=version.base_model, version=version.version)
            try:
                register_for_serving(ref)
            except GenerationError as exc:
                raise VersionError(f"vLLM could not load the adapter of v{version.version}, so the current version keeps serving: {exc}") from None
    ExpertVersion.objects.filter(expert_id=version.expert_id, status=VersionStatus.ACTIVE).update(status=VersionStatus.ARCHIVED)
    version.status = VersionStatus.ACTIVE
    version.activated_at = timezone.now()
    version.save(update_fields=["status", "activated_at"])
    return version


@transaction.atomic
def save_prompt(expert: Expert, system_prompt: str, citation_format: str, *, activate: bool = False, user: Any = None) -> ExpertVersion:
    """A new version with this prompt that shares the serving (else latest trained) version's adapter.

    Versions are immutable, so changing the prompt never changes what a version answered with.
    """
    try:
        validate_citation_format(citation_format)
    except ValueError as exc:
        raise VersionError(str(exc)) from None
    Expert.objects.select_for_update().filter(pk=expert.pk).first()
    source = serving_version(expert.slug) or expert.versions.filter(
        status__in=[VersionStatus.CANDIDATE, VersionStatus.ARCHIVED]).order_by("-version").first()
    number = (expert.versions.aggregate(m=Max("version"))["m"] or 0) + 1
    fields: dict[str, Any] = {}
    if source is not None:
        fields = {f: getattr(source, f) for f in (
            "base_model", "adapter_path", "knowledge_snapshot", "training_params", "data_fingerprint", "n_train", "n_eval", "metrics")}
    version = ExpertVersion.objects.create(
        expert=expert, version=number, status=VersionStatus.CANDIDATE, system_prompt=system_prompt.strip(),
        citation_format=citation_format, notes=f"prompt edit of v{source.version}" if source else "prompt only", **fields,
    )
    return activate_version(version, user) if activate else version


def relocate_adapter_folders(old_root: str, new_root: str, old_var_dir: str, new_var_dir: str) -> int:
    """Point the versions whose adapter is kept under ``old_root`` at the same folder under ``new_root``, and a base
    model recorded under the old data folder at the new one (a backup restored elsewhere: ``operations.restore``)."""
    moves = [(str(old_root).rstrip("/"), str(new_root).rstrip("/")), (str(old_var_dir).rstrip("/"), str(new_var_dir).rstrip("/"))]
    moved = 0
    for version in ExpertVersion.objects.exclude(adapter_path="", base_model=""):
        before = (version.adapter_path, version.base_model)
        version.adapter_path, version.base_model = (next((new + path[len(old):] for old, new in moves if path.startswith(f"{old}/")), path) for path in before)
        if (version.adapter_path, version.base_model) != before:
            version.save(update_fields=["adapter_path", "base_model"])
            moved += 1
    return moved
