"""Where a finished job's work can be seen: links from its job page to what it made (handed to the jobs app).

The jobs app sits below every app that queues work, so it cannot know their pages; the console
(above them all) maps a job's kind and its params/result to them.
"""

from __future__ import annotations

from typing import Any

from routing.models import TrainingRun

from .nav import optional_url as _url


def links_for(job: Any) -> list[tuple[str, str]]:
    """(label, url) of the pages showing what ``job`` made; empty when there is nothing to link."""
    params = job.params if isinstance(job.params, dict) else {}
    result = job.result if isinstance(job.result, dict) else {}
    expert = params.get("expert") if isinstance(params.get("expert"), str) else ""
    links: list[tuple[str, str]] = []
    if job.kind == "train_router":
        run = TrainingRun.objects.filter(job_id=job.pk).order_by("-pk").first()
        if run is not None:
            links.append((f"Training run {run.pk}" + (f" (router v{run.router_version.version})" if run.router_version else ""),
                          _url("console-training-run", run.pk)))
    elif job.kind in ("train_adapter",) and expert:
        links.append((f"{expert}'s adapters" + (f": version {result['version']}" if result.get("version") else ""), _url("expert-adapters", expert)))
    elif job.kind == "build_grounded_examples" and expert:
        links.append((f"{expert}'s training data", _url("expert-training-data", expert)))
    elif job.kind in ("index_documents", "ingest_documents", "rebuild_index", "delete_document") and expert:
        links.append((f"{expert}'s knowledge base", _url("knowledge-expert", expert)))
    elif job.kind in ("cluster_queries", "discover") and isinstance(result.get("run"), int):
        links.append((f"Discovery run {result['run']}: review its proposals", _url("labeling-run", result["run"])))
    elif job.kind in ("import_queries", "embed_queries"):
        links.append(("Discovery", _url("labeling-runs")))
    return [(label, url) for label, url in links if url]
