"""``manage.py evaluate {clustering,router,retrieval,answers,sentences,abtest} ...``: quality evaluations on datasets in the shared format.

Each subcommand prints its figures and, with ``--json FILE``, writes them for scripts. The work is
done by ``evaluation.<target>``; this command only parses arguments. ``answers``, ``retrieval`` and
``sentences`` replay the product (``evaluation.workspace``): run from the shell, they load the dataset into
a throw-away workspace (a child process on its own database and data folder); ``--in-place`` loads it
into the current one instead (what the child and the tests do).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from evaluation.management.commands import ReportCommand, names

# Evaluations that load the dataset into the product and ask through serving (``evaluation.workspace``).
REPLAYED = ("answers", "retrieval", "sentences")


class Command(ReportCommand):
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
        router.add_argument("--noise-report", action="store_true", help="also compare 0/10/20%% label noise, with and without the noise regulariser, on clean and typo-perturbed queries")
        router.add_argument("--ablate", action="store_true", help="also train the router without each of its mechanisms, scored on validation")
        router.add_argument("--variants", action="store_true", help="also train the fingerprint with the convolution (fingerprint_variants)")
        router.add_argument("--quality-only", action="store_true", help="skip latency, the fast tier and the conversation-context router")
        retrieval = sub.add_parser("retrieval", help="flat vs oracle vs routed retrieval, dense/sparse/hybrid")
        retrieval.add_argument("--dataset", required=True, help="folder with docs.jsonl (or passages.jsonl), queries.jsonl and qrels")
        retrieval.add_argument("--passages", action="store_true", help="index passages.jsonl and judge with qrels_passages.jsonl")
        retrieval.add_argument("--limit", type=int, default=None, help="ask at most this many test questions (default: all)")
        retrieval.add_argument("--split", default="test", choices=["test", "val"], help="the questions asked: val to choose a setting, test to report")
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
        answers.add_argument("--answers", dest="answers_path", default=None, metavar="FILE", help="also write every answer, per arm, with its scores (JSON lines)")
        sentences = sub.add_parser("sentences", help="the extractive answer's sentence scorer: hand-set, shipped and refitted weights on val and test")
        sentences.add_argument("--dataset", required=True, help="folder with docs.jsonl and queries.jsonl whose rows carry 'answer'")
        sentences.add_argument("--train-limit", type=int, default=None, help="train questions the weights are fitted on (stratified; default 3000, 0: all)")
        sentences.add_argument("--save-scorer", default=None, help="write the refitted sentence network here (JSON; EXTRACTIVE_SENTENCE_SCORER reads it)")
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
        self.common_options(clustering, router, abtest, retrieval, answers, sentences)
        for p in (clustering, retrieval, answers, sentences):
            p.add_argument("--in-place", action="store_true",
                           help="load the dataset into the current database and data folder (a test's, or a workspace made for it) "
                                "instead of a throw-away workspace")

    def handle(self, *args, **options):
        target = options["target"]
        if target != "abtest":
            self._check_files(Path(options["dataset"]), options)
            if (target in REPLAYED or options.get("replay")) and not options["in_place"]:
                return self.rerun_isolated(target)
        from experts.ml.lora_errors import LoraError

        try:
            report = getattr(self, f"_{target}")(options)
        except (ValueError, LoraError) as exc:  # MissingKnowledge and AbTestError are ValueErrors
            raise CommandError(str(exc)) from exc
        self.emit(report, options["json_path"])

    def _check_files(self, dataset: Path, options: dict) -> None:
        """Refuse, before any work, a dataset without the files its evaluation reads."""
        if not (dataset / "queries.jsonl").exists():
            raise CommandError(f"{dataset} has no queries.jsonl")
        if options["target"] == "sentences" and not (dataset / "docs.jsonl").is_file():
            raise CommandError(f"{dataset} has no docs.jsonl (one row per document: doc_id, domain, title, text)")
        if options["target"] == "retrieval":
            needed = ("passages.jsonl", "qrels_passages.jsonl") if options["passages"] else ("docs.jsonl", "qrels.jsonl")
            missing = [name for name in needed if not (dataset / name).is_file()]
            if missing:
                raise CommandError(f"{dataset} has no {' or '.join(missing)}: evaluate retrieval{' --passages' if options['passages'] else ''} "
                                   f"indexes {needed[0]} and judges with {needed[1]} (one row per relevant pair: query_id, doc_id)")

    def _clustering(self, options: dict) -> dict:
        from evaluation.clustering import evaluate_clustering, replay_discovery

        common = {"label": options["label"], "n_experts": options["experts"], "split": options["split"], "say": self.stdout.write}
        if options["replay"]:
            return replay_discovery(Path(options["dataset"]), **common)
        return evaluate_clustering(Path(options["dataset"]), limit=options["limit"], variants=options["variants"], **common)

    def _sentences(self, options: dict) -> dict:
        from evaluation.sentences import DEFAULT_TRAIN_LIMIT, evaluate_sentences

        return evaluate_sentences(Path(options["dataset"]), train_limit=_or_all(options["train_limit"], DEFAULT_TRAIN_LIMIT), say=self.stdout.write,
                                  save_scorer=Path(options["save_scorer"]) if options["save_scorer"] else None)

    def _retrieval(self, options: dict) -> dict:
        from evaluation.retrieval import evaluate_retrieval

        return evaluate_retrieval(Path(options["dataset"]), passages=options["passages"], say=self.stdout.write, limit=options["limit"],
                                  split=options["split"])

    def _router(self, options: dict) -> dict:
        from django.conf import settings

        from encoders import resolve_backend
        from evaluation.router import evaluate_router

        if options["backend"]:
            settings.EMBEDDING_BACKEND = resolve_backend(options["backend"])  # before any encoder is made (keyed by backend)
        knowledge = Path(options["knowledge"]) if options["knowledge"] else None
        if knowledge is not None and not (knowledge / "docs.jsonl").is_file():
            raise CommandError(f"--knowledge {knowledge}: no docs.jsonl there (one row per document: doc_id, domain, title, text)")
        if options["oos_from"] and not Path(options["oos_from"]).exists():
            raise CommandError(f"--oos-from {options['oos_from']}: no such file")
        report = evaluate_router(Path(options["dataset"]), label=options["label"], noise=options["noise"], say=self.stdout.write,
                                 noise_report=options["noise_report"], train_per_label=options["train_per_label"], knowledge=knowledge,
                                 foreign_oos=Path(options["oos_from"]) if options["oos_from"] else None,
                                 variants=options["variants"], quality_only=options["quality_only"], ablation=options["ablate"])
        report["embedding_backend"] = resolve_backend()
        return report

    def _answers(self, options: dict) -> dict:
        from evaluation.answers import DEFAULT_LIMIT, AnswerConfig, evaluate_answers

        if options["questions_path"] and not Path(options["questions_path"]).is_file():
            raise CommandError(f"--questions {options['questions_path']}: no such file")
        config = AnswerConfig(limit=_or_all(options["limit"], DEFAULT_LIMIT), split=options["split"], generators=tuple(names(options["generators"])),
                              modes=tuple(names(options["modes"])), adapter_steps=options["adapter_steps"],
                              questions_path=options["questions_path"], answers_path=options["answers_path"], passages=options["passages"])
        return evaluate_answers(Path(options["dataset"]), config, say=self.stdout.write)

    def _abtest(self, options: dict) -> dict:
        from routing.experiments.stats import Config, simulation_report

        if options["n_simulations"] < 1:
            raise CommandError("--n-simulations must be at least 1")
        designs = ["sequential", "fixed"] if options["design"] == "both" else [options["design"]]
        reports = {design: simulation_report(Config(baseline=options["baseline"], min_effect=options["effect"], alpha=options["alpha"], design=design),
                                             n_simulations=options["n_simulations"], per_arm=options["per_arm"], looks=options["looks"], seed=options["seed"])
                   for design in designs}
        # The headline keys are those of the first design (sequential by default: the one the console uses).
        first = reports[designs[0]]
        return {"false_positive_rate": first["false_positive_rate"], "power": first["power"], "n_simulations": first["n_simulations"], "designs": reports}


def _or_all(limit: int | None, default: int) -> int | None:
    """An option's limit: ``default`` when not given, every row (None) when given 0."""
    return default if limit is None else (limit or None)
