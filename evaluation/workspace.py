"""An evaluation's workspace: a dataset loaded into the product as a team would load it, and asked through serving.

``load`` goes through the product's own services in a team's order: import the questions, one expert
per label (``labeling.services.run_from_labels``), each expert's documents ingested and indexed, then
the router trained with its defaults. ``ask`` sends a question through ``serving.chat.answer`` with the
user's earlier turns. Arms: ``auto`` (the router), ``oracle`` (the gold expert by slug) and ``flat``
(one more expert, ``FLAT``, holding every document). ``isolated`` runs in a child process on its own
database and data folder, sharing the caller's base model and exported encoders read only.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.datasets import embedding_cache_dir, read_jsonl, user_turns

Say = Callable[[str], Any]

SOURCE = "evaluation"  # the imported questions' source
FLAT = "every-document"  # the flat arm's expert: every document in one collection, reached by its slug
# Settings that would reach outside the workspace (a shared cache, a Qdrant server): the child does without them.
OUTSIDE = ("REDIS_URL", "QDRANT_URL", "QDRANT_API_KEY", "DATABASE_URL", "CELERY_BROKER_URL")


# --- the dataset --------------------------------------------------------------------------------

@dataclass
class Dataset:
    """A folder in the shared schema (``../shared/datasets/README.md``): questions, documents and gold relevance."""

    name: str
    queries: list[dict[str, Any]]
    documents: list[dict[str, Any]] = field(default_factory=list)
    relevant: dict[str, set[str]] = field(default_factory=dict)  # query_id -> relevant doc_ids (qrels)

    @classmethod
    def read(cls, folder: Path, passages: bool = False) -> Dataset:
        """``queries.jsonl``, and where present the documents (``docs.jsonl``, or ``passages.jsonl``) and their qrels."""
        folder = Path(folder)
        docs, qrels = ("passages.jsonl", "qrels_passages.jsonl") if passages else ("docs.jsonl", "qrels.jsonl")
        relevant: dict[str, set[str]] = {}
        if (folder / qrels).is_file():
            for row in read_jsonl(folder / qrels):
                relevant.setdefault(str(row["query_id"]), set()).add(str(row["doc_id"]))
        return cls(folder.name, read_jsonl(folder / "queries.jsonl"),
                   read_jsonl(folder / docs) if (folder / docs).is_file() else [], relevant)

    def questions(self, split: str, label: str = "domain") -> list[dict[str, Any]]:
        """The rows of ``split`` with a text and a label (out-of-scope rows have none)."""
        return [q for q in self.queries if q.get("split") == split and q.get(label) and q.get("text", "").strip()]


def history(question: dict[str, Any]) -> list[dict[str, str]]:
    """The user's earlier turns of the question's conversation (``datasets.user_turns``), as a client sends them."""
    return [{"role": "user", "content": text} for text in user_turns(question)]


# --- loading it into the product ------------------------------------------------------------------

@dataclass
class Loaded:
    """What ``load`` made: the expert of each label, the flat arm's expert, the router version and the seconds each step took."""

    experts: dict[str, str]  # label -> expert slug
    flat: str | None
    router_version: int | None
    router_metrics: dict[str, Any]
    seconds: dict[str, float]

    def scope(self, model: str | None) -> set[str]:
        """The experts a question asked as ``model`` may reach, as a client whose API key is scoped to them: the flat
        arm its one expert, every other arm the dataset's own experts (a widened routed search must not read the
        flat arm's copy of every document, which no team has)."""
        return {self.flat} if self.flat and model == self.flat else set(self.experts.values())


def _import_rows(dataset: Dataset, label: str) -> bytes:
    """The dataset's questions in the query importer's columns (``docs/YOUR_DATA.md``), as a team exports its log."""
    out = io.StringIO()
    for q in dataset.queries:
        if not (q.get("text") or "").strip():
            continue
        row = {"text": q["text"], "label": q.get(label) or "", "split": q.get("split") or "", "answer": q.get("answer") or "",
               "conversation": q.get("dial_id") or q.get("conversation") or ""}
        out.write(json.dumps(row) + "\n")
    return out.getvalue().encode()


def load(dataset: Dataset, label: str = "domain", flat: bool = False, say: Say = print) -> Loaded:
    """Load ``dataset`` into the current database as a team would (see the module docstring)."""
    from experts import services as expert_services
    from experts.models import Expert
    from knowledge.indexing import index_pending
    from knowledge.ingest import upsert_document
    from knowledge.parsers import DocumentInput
    from labeling import proposals
    from labeling import services as labeling
    from routing import services as routing

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    report = labeling.import_queries(io.BytesIO(_import_rows(dataset, label)), f"{dataset.name}.jsonl", SOURCE)
    labeling.embed_missing(source=SOURCE)
    run = labeling.run_from_labels(SOURCE)
    if run.status != "promoted":
        proposals.promote_run(run)
    experts = {p.name: p.expert.slug for p in run.proposals.select_related("expert") if p.expert is not None}
    seconds["import_s"] = round(time.perf_counter() - t0, 1)
    say(f"  imported {report.imported:,} questions into {len(experts)} experts in {seconds['import_s']} s")

    t0 = time.perf_counter()
    by_label: dict[str, list[dict[str, Any]]] = {}
    for doc in dataset.documents:
        by_label.setdefault(doc.get(label) or doc.get("domain") or "", []).append(doc)
    owners = [(Expert.objects.get(slug=slug), by_label.get(name, [])) for name, slug in sorted(experts.items())]
    if flat and dataset.documents:
        expert, _ = expert_services.upsert_expert(FLAT, "Every document", description="Every document of every expert, in one collection")
        owners.append((expert, dataset.documents))
    for expert, docs in owners:
        for doc in docs:
            upsert_document(expert, DocumentInput(external_id=str(doc["doc_id"]), title=doc.get("title") or "", text=doc["text"]))
        if docs:
            index_pending(expert)
    seconds["ingest_s"] = round(time.perf_counter() - t0, 1)
    if dataset.documents:
        say(f"  ingested {len(dataset.documents):,} documents ({'and once more into one flat expert, ' if flat else ''}{seconds['ingest_s']} s)")

    t0 = time.perf_counter()
    version = routing.train_router_from_labels({"seed": 0}, activate="always")
    seconds["train_router_s"] = round(time.perf_counter() - t0, 1)
    val = version.metrics.get("val", {}).get("accuracy")
    say(f"  router v{version.version} trained in {seconds['train_router_s']} s (validation accuracy {val if val is None else round(val, 3)})")
    return Loaded(experts, FLAT if flat and dataset.documents else None, version.version, version.metrics, seconds)


def ask(question: dict[str, Any], model: str, allowed: set[str] | None = None) -> Any:
    """``question`` through serving's chat path (``serving.chat.answer``) as ``model``, with its conversation's earlier user turns,
    reaching only the ``allowed`` experts (``Loaded.scope``; None: every expert).

    Returns the ``ChatResult`` a ``POST /v1/chat/completions`` would have answered from. Where the answer asks which
    expert the question means, the user replies with the one they meant (the row's first ``choices``, else its
    ``domain``; else the first offered) and the answer to that reply is returned (its ``choice`` is set).
    """
    from serving.chat import answer

    earlier = history(question)
    result = answer(question["text"], model=model, history=earlier, allowed=allowed)
    if result.clarify:
        meant = {*(question.get("choices") or [])[:1]} or {question.get("domain")}
        reply = next((c for c in result.clarify if c["slug"] in meant or c["name"] in meant), result.clarify[0])
        asked = [*earlier, {"role": "user", "content": question["text"]}, {"role": "assistant", "content": result.answer}]
        result = answer(reply["name"], model=model, history=asked, allowed=allowed)
    return result


# --- the throw-away workspace ----------------------------------------------------------------

def isolated(argv: list[str], say: Say = print, program: list[str] | None = None, disk_cache: bool = True) -> int:
    """Run ``manage.py <argv>`` (or ``program + argv``) in a fresh workspace: its own database and data folder, migrated
    first and removed after. ``disk_cache``: the evaluations' vector cache on disk is shared (a benchmark of
    embedding passes it False: a team's new documents are in no cache).

    Returns the child's exit status; its output is passed to ``say`` line by line.
    """
    from django.conf import settings

    root = Path(tempfile.mkdtemp(prefix="switchboard-evaluation-"))
    try:
        models = Path(settings.VAR_DIR) / "models"
        if models.is_dir():
            (root / "models").symlink_to(models.resolve(), target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
        # The product's vector cache on disk, shared with every evaluation: a dataset's second load embeds nothing again.
        env.update({"EMBEDDING_DISK_CACHE": str(embedding_cache_dir()) if disk_cache else "", "VAR_DIR": str(root), "DATABASE_URL": f"sqlite:///{root / 'workspace.sqlite3'}",
                    "CELERY_TASK_ALWAYS_EAGER": "1", "BASE_MODEL": str(settings.BASE_MODEL), "ADAPTER_DIR": str(root / "adapters"),
                    "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "switchboard.settings")})
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        migrate = subprocess.run([sys.executable, manage, "migrate", "--no-input", "--verbosity", "0"], env=env, capture_output=True, text=True)
        if migrate.returncode:
            say(migrate.stdout + migrate.stderr)
            return migrate.returncode
        child = subprocess.Popen([*(program or [sys.executable, manage]), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert child.stdout is not None
        for line in child.stdout:
            say(line.rstrip("\n"))
        return child.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
