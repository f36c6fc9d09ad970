"""``manage.py evaluate {clustering,router,retrieval,answers,sentences,abtest} ...``: quality evaluations on datasets in the shared format.

Each subcommand prints its figures and, with ``--json FILE``, writes them for scripts. The work is
done by ``evaluation.<target>``; this command only parses arguments. ``answers``, ``retrieval`` and
``sentences`` replay the product (``evaluation.workspace``): run from the shell, they load the dataset into
a throw-away workspace (a child process on its own database and data folder); ``--in-place`` loads it
into the current one instead (what the child and the tests do).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

# Evaluations that load the dataset into the product and ask through serving (``evaluation.workspace``).
REPLAYED = ("answers", "retrieval", "sentences")


class Command(BaseCommand):
    help = "Evaluate expert discovery (clustering), retrieval or the router on a dataset folder (queries.jsonl with text/domain/intent/split)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="target", required=True)
        clustering = sub.add_parser("clustering", help="our DBSCAN + topic grouping against HDBSCAN and KMeans")
        clustering.add_argument("--dataset", required=True, help="folder with queries.jsonl")
        clustering.add_argument("--label", choices=["domain", "intent"], default="domain")
        clustering.add_argument("--experts", type=int, default=None, help="target number of experts (default: distinct labels)")
        clustering.add_argument("--limit", type=int, default=None, help="use at most this many queries (stratified sample)")
        clustering.add_argument("--split", choices=["heldout", "train", "all", "val", "test"], default="heldout",
                                help="rows to cluster (default: every row outside train, on which the product's defaults were chosen)")
        clustering.add_argument("--variants", action="store_true", help="also score every grouping and noise mode (how the defaults were chosen, with --split train)")
        clustering.add_argument("--replay", action="store_true",
                                help="run discovery through the product in a throw-away workspace instead: import the questions without labels, "
                                     "start a run told K; then, where the dataset has documents, seed a run with each department's documents")
        clustering.add_argument("--json", dest="json_path", default=None)
        router = sub.add_parser("router", help="the learned router against logistic regression and nearest-example routing")
        router.add_argument("--dataset", required=True)
        router.add_argument("--label", choices=["domain", "intent"], default="domain")
        router.add_argument("--noise", type=float, default=0.0, help="share of training labels flipped")
        router.add_argument("--train-per-label", type=int, default=None, help="at most N training questions per label (a small team's data; validation in proportion)")
        router.add_argument("--backend", default=None, help="EMBEDDING_BACKEND to embed with (torch, torch-bf16, onnx, onnx-int8, auto; default: the setting)")
        router.add_argument("--knowledge", default=None, metavar="DIR",
                            help="a folder whose docs.jsonl holds each domain's documents: also score knowledge-aware routing (router_knowledge)")
        router.add_argument("--oos-from", default=None, metavar="FILE",
                            help="another dataset's queries.jsonl whose out-of-scope rows join this one's (for a dataset without any)")
        router.add_argument("--json", dest="json_path", default=None)
        router.add_argument("--noise-report", action="store_true", help="also compare 0/10/20%% label noise, with and without the noise regulariser, on clean and typo-perturbed queries")
        router.add_argument("--ablate", action="store_true", help="also train the router without each of its mechanisms, scored on validation")
        router.add_argument("--variants", action="store_true", help="also train the fingerprint with the convolution (fingerprint_variants)")
        router.add_argument("--quality-only", action="store_true", help="skip latency, the fast tier and the conversation-context router")
        retrieval = sub.add_parser("retrieval", help="flat vs oracle vs routed retrieval, dense/sparse/hybrid")
        retrieval.add_argument("--dataset", required=True, help="folder with docs.jsonl (or passages.jsonl), queries.jsonl and qrels")
        retrieval.add_argument("--passages", action="store_true", help="index passages.jsonl and judge with qrels_passages.jsonl")
        retrieval.add_argument("--limit", type=int, default=None, help="ask at most this many test questions (default: all)")
        retrieval.add_argument("--split", default="test", choices=["test", "val"], help="the questions asked: val to choose a setting, test to report")
        retrieval.add_argument("--json", dest="json_path", default=None)
        answers = sub.add_parser("answers", help="the answers a person gets (F1, recall, words, junk, abstentions, citations) per arm and generator, replayed through the product")
        answers.add_argument("--dataset", required=True, help="folder with docs.jsonl, queries.jsonl whose rows carry 'answer' (qrels.jsonl for citations)")
        answers.add_argument("--limit", type=int, default=None, help="questions (stratified by domain; default: the default run's sample, 0: all)")
        answers.add_argument("--split", choices=["test", "val"], default="test", help="questions to answer (val: where defaults are chosen)")
        answers.add_argument("--generators", default="extractive,base,lora", help="comma-separated: extractive, base, lora")
        answers.add_argument("--modes", default="flat,auto,oracle", help="comma-separated: flat, auto, oracle, fast (auto:fast)")
        answers.add_argument("--adapter-steps", type=int, default=None, help="cap each expert's adapter training (default: the training job's own)")
        answers.add_argument("--questions", dest="questions_path", default=None, metavar="FILE",
                             help="also ask these questions (JSON lines: question, facts [..], optional domain) and score fully_answered")
        answers.add_argument("--passages", action="store_true", help="ingest passages.jsonl as the documents (judged with qrels_passages.jsonl)")
        answers.add_argument("--json", dest="json_path", default=None)
        answers.add_argument("--answers", dest="answers_path", default=None, metavar="FILE", help="also write every answer, per arm, with its scores (JSON lines)")
        sentences = sub.add_parser("sentences", help="the extractive answer's sentence scorer: hand-set, shipped and refitted weights on val and test")
        sentences.add_argument("--dataset", required=True, help="folder with docs.jsonl and queries.jsonl whose rows carry 'answer'")
        sentences.add_argument("--train-limit", type=int, default=None, help="train questions the weights are fitted on (stratified; default 3000, 0: all)")
        sentences.add_argument("--save-scorer", default=None, help="write the refitted sentence network here (JSON; EXTRACTIVE_SENTENCE_SCORER reads it)")
        sentences.add_argument("--json", dest="json_path", default=None)
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
        for p in (clustering, router, abtest, retrieval, answers, sentences):
            p.add_argument("--skip-checks", action="store_true", help="skip Django system checks")
        for p in (clustering, retrieval, answers, sentences):
            p.add_argument("--in-place", action="store_true",
                           help="load the dataset into the current database and data folder (a test's, or a workspace made for it) "
                                "instead of a throw-away workspace")

    def handle(self, *args, **options):
        if options["target"] == "abtest":
            return self._abtest(options)
        dataset = Path(options["dataset"])
        if not (dataset / "queries.jsonl").exists():
            raise CommandError(f"{dataset} has no queries.jsonl")
        self._check_files(dataset, options)
        replayed = options["target"] in REPLAYED or (options["target"] == "clustering" and options["replay"])
        if replayed and not options["in_place"]:
            return self._isolated(options)
        if options["target"] == "clustering" and options["replay"]:
            from evaluation.clustering import replay_discovery

            try:
                report = replay_discovery(dataset, label=options["label"], n_experts=options["experts"], split=options["split"], say=self.stdout.write)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        elif options["target"] == "clustering":
            from evaluation.clustering import evaluate_clustering

            report = evaluate_clustering(dataset, label=options["label"], n_experts=options["experts"], limit=options["limit"], say=self.stdout.write,
                                         split=options["split"], variants=options["variants"])
        elif options["target"] == "answers":
            report = self._answers(dataset, options)
        elif options["target"] == "sentences":
            from evaluation.sentences import DEFAULT_TRAIN_LIMIT, evaluate_sentences

            limit = DEFAULT_TRAIN_LIMIT if options["train_limit"] is None else (options["train_limit"] or None)
            try:
                report = evaluate_sentences(dataset, train_limit=limit, say=self.stdout.write,
                                            save_scorer=Path(options["save_scorer"]) if options["save_scorer"] else None)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        elif options["target"] == "retrieval":
            from evaluation.retrieval import evaluate_retrieval

            try:
                report = evaluate_retrieval(dataset, passages=options["passages"], say=self.stdout.write, limit=options["limit"], split=options["split"])
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        else:
            from evaluation.router import evaluate_router

            if options.get("backend"):
                from django.conf import settings

                from encoders import resolve_backend

                settings.EMBEDDING_BACKEND = resolve_backend(options["backend"])  # before any encoder is made (keyed by backend)

            knowledge = Path(options["knowledge"]) if options.get("knowledge") else None
            if knowledge is not None and not (knowledge / "docs.jsonl").is_file():
                raise CommandError(f"--knowledge {knowledge}: no docs.jsonl there (one row per document: doc_id, domain, title, text)")
            if options.get("oos_from") and not Path(options["oos_from"]).exists():
                raise CommandError(f"--oos-from {options['oos_from']}: no such file")
            from routing.ml.knowledge import MissingKnowledge

            try:
                report = evaluate_router(dataset, label=options["label"], noise=options["noise"], say=self.stdout.write, noise_report=options["noise_report"],
                                        train_per_label=options["train_per_label"], knowledge=knowledge,
                                        foreign_oos=Path(options["oos_from"]) if options.get("oos_from") else None,
                                        variants=options["variants"], quality_only=options["quality_only"], ablation=options["ablate"])
            except (MissingKnowledge, ValueError) as exc:
                raise CommandError(str(exc)) from exc
            from encoders import resolve_backend

            report["embedding_backend"] = resolve_backend()
        self._emit(report, options["json_path"])

    def _emit(self, report: dict, json_path: str | None) -> None:
        """Print the report as JSON and, with ``--json``, write it there too (atomically: a temp file renamed)."""
        text = json.dumps(report, indent=2)
        self.stdout.write(text)
        if json_path:
            tmp = Path(f"{json_path}.tmp")
            tmp.write_text(text)
            tmp.replace(json_path)
            self.stdout.write(self.style.SUCCESS(f"wrote {json_path}"))

    def _check_files(self, dataset: Path, options: dict) -> None:
        """Refuse, before any work, a dataset without the files its evaluation reads."""
        if options["target"] == "sentences" and not (dataset / "docs.jsonl").is_file():
            raise CommandError(f"{dataset} has no docs.jsonl (one row per document: doc_id, domain, title, text)")
        if options["target"] == "retrieval":
            needed = ("passages.jsonl", "qrels_passages.jsonl") if options["passages"] else ("docs.jsonl", "qrels.jsonl")
            missing = [name for name in needed if not (dataset / name).is_file()]
            if missing:
                raise CommandError(f"{dataset} has no {' or '.join(missing)}: evaluate retrieval{' --passages' if options['passages'] else ''} "
                                   f"indexes {needed[0]} and judges with {needed[1]} (one row per relevant pair: query_id, doc_id)")

    def _answers(self, dataset: Path, options: dict) -> dict:
        from evaluation.answers import DEFAULT_LIMIT, AnswerConfig, evaluate_answers
        from experts.ml.lora_errors import LoraError

        if options["questions_path"] and not Path(options["questions_path"]).is_file():
            raise CommandError(f"--questions {options['questions_path']}: no such file")
        config = AnswerConfig(limit=DEFAULT_LIMIT if options["limit"] is None else (options["limit"] or None), split=options["split"],
                              generators=tuple(g.strip() for g in options["generators"].split(",") if g.strip()),
                              modes=tuple(m.strip() for m in options["modes"].split(",") if m.strip()), adapter_steps=options["adapter_steps"],
                              questions_path=options["questions_path"], answers_path=options["answers_path"], passages=options["passages"])
        try:
            return evaluate_answers(dataset, config, say=self.stdout.write)
        except (ValueError, LoraError) as exc:
            raise CommandError(str(exc)) from exc

    def _isolated(self, options: dict) -> None:
        """Run this command again in a throw-away workspace (``evaluation.workspace.isolated``), the JSON written by the child."""
        from evaluation.workspace import isolated

        if len(sys.argv) < 3 or sys.argv[1] != "evaluate":
            raise CommandError("called from code, evaluate answers/retrieval/sentences runs in the caller's database: pass --in-place")
        code = isolated([*sys.argv[1:], "--in-place"], say=self.stdout.write)
        if code:
            raise CommandError(f"the evaluation's workspace ended with exit status {code}")

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
        self._emit(report, options["json_path"])
