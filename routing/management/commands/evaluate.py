"""``manage.py evaluate {clustering,router} ...``: quality evaluations on datasets in the shared format.

Each subcommand prints its figures and, with ``--json FILE``, writes them for scripts. The work is
done by ``labeling.evaluation`` (clustering) and ``routing.evaluation`` (router); this command only
parses arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Evaluate expert discovery (clustering), retrieval or the router on a dataset folder (queries.jsonl with text/domain/intent/split)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="target", required=True)
        clustering = sub.add_parser("clustering", help="our DBSCAN + topic grouping against HDBSCAN and KMeans")
        clustering.add_argument("--dataset", required=True, help="folder with queries.jsonl")
        clustering.add_argument("--label", choices=["domain", "intent"], default="domain")
        clustering.add_argument("--experts", type=int, default=None, help="target number of experts (default: distinct labels)")
        clustering.add_argument("--limit", type=int, default=None, help="use at most this many queries (stratified sample)")
        clustering.add_argument("--json", dest="json_path", default=None)
        router = sub.add_parser("router", help="the learned router against logistic regression and nearest-example routing")
        router.add_argument("--dataset", required=True)
        router.add_argument("--label", choices=["domain", "intent"], default="domain")
        router.add_argument("--noise", type=float, default=0.0, help="share of training labels flipped")
        router.add_argument("--json", dest="json_path", default=None)
        router.add_argument("--noise-report", action="store_true", help="also compare 0/10/20%% label noise, with and without the noise regulariser, on clean and typo-perturbed queries")
        retrieval = sub.add_parser("retrieval", help="flat vs oracle vs routed retrieval, dense/sparse/hybrid")
        retrieval.add_argument("--dataset", required=True, help="folder with docs.jsonl (or passages.jsonl), queries.jsonl and qrels")
        retrieval.add_argument("--passages", action="store_true", help="index passages.jsonl and judge with qrels_passages.jsonl")
        retrieval.add_argument("--json", dest="json_path", default=None)
        retrieval.add_argument("--skip-checks", action="store_true", help="skip Django system checks")
        # Subparsers do not inherit BaseCommand's common options; accept the ones call_command passes.
        for p in (clustering, router):
            p.add_argument("--skip-checks", action="store_true", help="skip Django system checks")

    def handle(self, *args, **options):
        dataset = Path(options["dataset"])
        if not (dataset / "queries.jsonl").exists():
            raise CommandError(f"{dataset} has no queries.jsonl")
        if options["target"] == "clustering":
            from labeling.evaluation import evaluate_clustering

            report = evaluate_clustering(dataset, label=options["label"], n_experts=options["experts"], limit=options["limit"], say=self.stdout.write)
        elif options["target"] == "retrieval":
            from routing.retrieval_evaluation import evaluate_retrieval

            report = evaluate_retrieval(dataset, passages=options["passages"], say=self.stdout.write)
        else:
            from routing.evaluation import evaluate_router

            report = evaluate_router(dataset, label=options["label"], noise=options["noise"], say=self.stdout.write, noise_report=options["noise_report"])
        self.stdout.write(json.dumps(report, indent=2))
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps(report, indent=2))
            self.stdout.write(self.style.SUCCESS(f"wrote {options['json_path']}"))
