"""``manage.py evaluate {clustering,router,retrieval,abtest} ...``: quality evaluations on datasets in the shared format.

Each subcommand prints its figures and, with ``--json FILE``, writes them for scripts. The work is
done by ``evaluation.clustering`` (clustering) and ``evaluation.router`` (router); this command only
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
        abtest = sub.add_parser("abtest", help="A/B decision rule by simulation: false-positive rate (no effect) and power (at the minimum effect)")
        abtest.add_argument("--simulate", action="store_true", required=True, help="simulate experiments with a known effect and with none")
        abtest.add_argument("--n-simulations", type=int, default=2000)
        abtest.add_argument("--baseline", type=float, default=0.6, help="control thumbs-up rate")
        abtest.add_argument("--effect", type=float, default=0.05, help="minimum relative effect (the design's, and the simulated true effect)")
        abtest.add_argument("--per-arm", type=int, default=None, help="units per arm (default: the planned sample)")
        abtest.add_argument("--design", choices=["sequential", "fixed", "both"], default="both")
        abtest.add_argument("--looks", type=int, default=20, help="peeks of the sequential design")
        abtest.add_argument("--alpha", type=float, default=0.05)
        abtest.add_argument("--seed", type=int, default=0)
        abtest.add_argument("--json", dest="json_path", default=None)
        # Subparsers do not inherit BaseCommand's common options; accept the ones call_command passes.
        for p in (clustering, router, abtest):
            p.add_argument("--skip-checks", action="store_true", help="skip Django system checks")

    def handle(self, *args, **options):
        if options["target"] == "abtest":
            return self._abtest(options)
        dataset = Path(options["dataset"])
        if not (dataset / "queries.jsonl").exists():
            raise CommandError(f"{dataset} has no queries.jsonl")
        if options["target"] == "clustering":
            from evaluation.clustering import evaluate_clustering

            report = evaluate_clustering(dataset, label=options["label"], n_experts=options["experts"], limit=options["limit"], say=self.stdout.write)
        elif options["target"] == "retrieval":
            from evaluation.retrieval import evaluate_retrieval

            report = evaluate_retrieval(dataset, passages=options["passages"], say=self.stdout.write)
        else:
            from evaluation.router import evaluate_router

            report = evaluate_router(dataset, label=options["label"], noise=options["noise"], say=self.stdout.write, noise_report=options["noise_report"])
        self.stdout.write(json.dumps(report, indent=2))
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps(report, indent=2))
            self.stdout.write(self.style.SUCCESS(f"wrote {options['json_path']}"))

    def _abtest(self, options):
        from routing.experiments.stats import AbTestError, Config, simulation_report

        if options["n_simulations"] < 1:
            raise CommandError("--n-simulations must be at least 1")
        designs = ["sequential", "fixed"] if options["design"] == "both" else [options["design"]]
        reports = {}
        try:
            for design in designs:
                config = Config(baseline=options["baseline"], min_effect=options["effect"], alpha=options["alpha"], design=design)
                reports[design] = simulation_report(config, n_simulations=options["n_simulations"], per_arm=options["per_arm"], looks=options["looks"], seed=options["seed"])
        except AbTestError as exc:
            raise CommandError(str(exc)) from exc
        # The headline keys are those of the first design (sequential by default: the one the console uses).
        first = reports[designs[0]]
        report = {"false_positive_rate": first["false_positive_rate"], "power": first["power"], "n_simulations": first["n_simulations"], "designs": reports}
        self.stdout.write(json.dumps(report, indent=2))
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps(report, indent=2))
            self.stdout.write(self.style.SUCCESS(f"wrote {options['json_path']}"))
