"""``manage.py experts ...``: a team's path from the shell, through the services the console and the REST API call.

    manage.py experts create "Billing" --team Support        # a department made first (optional) ...
    manage.py ingest_docs --expert billing docs/billing/     # ... with its documents: they seed discovery
    manage.py import_queries log.csv --team Support          # the questions
    manage.py experts discover --team Support --experts 4    # a discovery run to review
    manage.py experts proposals RUN                          # what it found
    manage.py experts rename RUN PROPOSAL "Billing"          # review: rename, merge, discard
    manage.py experts promote RUN                            # every open proposal becomes an expert
    manage.py ingest_docs --expert billing docs/billing/     # each expert's documents
    manage.py experts train                                  # the router, and whether it went live
    manage.py experts activate VERSION

Jobs (discovery, training) go to the worker that ``make run`` starts and the command waits for them;
``--here`` runs them in this process instead, with no worker.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from jobs.models import Job
from labeling import proposals as review
from labeling import services as discovery
from labeling.models import ClusteringRun, Proposal
from routing import services as training
from routing.forms import TrainRouterForm
from routing.models import RouterVersion
from routing.selectors import activation_verdict

WAIT_S = 3600  # the longest a command waits for its job before it says how to follow it
POLL_S = 1.0
FINISHED = {"succeeded", "failed", "cancelled"}


class Command(BaseCommand):
    help = "A team's path from the shell: discover experts in imported questions, review and promote them, train and activate the router."

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        made = sub.add_parser("create", help="make an empty expert for a department, to upload its documents before discovery")
        made.add_argument("name")
        made.add_argument("--team", default="", help="the team (group name) that owns it; default: none, staff only")
        made.add_argument("--description", default="", help="what the department answers")
        found = sub.add_parser("discover", help="cluster the imported questions into proposals to review")
        found.add_argument("--team", default="", help="the team (group name) whose questions; default: none, staff only")
        found.add_argument("--experts", type=int, default=None, help="how many experts (departments) to find; default: suggested")
        found.add_argument("--source", default="", help="only the questions imported from this source")
        listed = sub.add_parser("proposals", help="a run's proposals: id, name, questions, status, examples")
        listed.add_argument("run", type=int)
        renamed = sub.add_parser("rename", help="rename a proposal")
        renamed.add_argument("run", type=int)
        renamed.add_argument("proposal", type=int)
        renamed.add_argument("name")
        merged = sub.add_parser("merge", help="merge proposals into the first one named")
        merged.add_argument("run", type=int)
        merged.add_argument("proposals", type=int, nargs="+")
        dropped = sub.add_parser("discard", help="discard a proposal (its questions become unassigned)")
        dropped.add_argument("run", type=int)
        dropped.add_argument("proposal", type=int)
        promoted = sub.add_parser("promote", help="turn every open proposal of a run into an expert")
        promoted.add_argument("run", type=int)
        trained = sub.add_parser("train", help="train the router on the promoted experts' questions")
        trained.add_argument("--activation", choices=["if_better", "never", "always"], default=None,
                             help="how the new version goes live (default: if it is better than the active one)")
        activated = sub.add_parser("activate", help="make a router version the serving one")
        activated.add_argument("version", type=int)
        for jobbed in (found, trained):
            jobbed.add_argument("--here", action="store_true", help="run the job in this process instead of the worker")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, "_" + options["action"])(options)
        except (review.ReviewConflict, ValueError) as exc:
            raise CommandError(str(exc)) from exc

    # -- discovery and review ------------------------------------------------------------------

    @staticmethod
    def _team(name: str) -> Group | None:
        team = Group.objects.filter(name=name).first() if name else None
        if name and team is None:
            raise CommandError(f"no team named {name!r}")
        return team

    def _create(self, options: dict[str, Any]) -> None:
        expert = discovery.make_department(" ".join(options["name"].split()), options["description"], team=self._team(options["team"]))
        self.stdout.write(f"expert {expert.slug}: upload its documents (manage.py ingest_docs --expert {expert.slug} FILES), "
                          "then discovery gives each department's questions to it")

    def _discover(self, options: dict[str, Any]) -> None:
        team = self._team(options["team"])
        if options["experts"] is not None and options["experts"] < 1:
            raise CommandError("--experts must be at least 1")
        job = discovery.enqueue_discovery(options["source"], n_experts=options["experts"], team=team)
        job = self._wait(job, options["here"], "labeling.tasks.discover")
        run = ClusteringRun.objects.filter(pk=(job.result or {}).get("run")).first()
        if run is None:
            raise CommandError("the discovery job finished without a run")
        self.stdout.write(f"run {run.pk}: {run.proposals.count()} proposals to review")
        self._proposals({"run": run.pk})

    def _proposals(self, options: dict[str, Any]) -> None:
        run = self._run(options["run"])
        for p in run.proposals.order_by("index"):
            examples = "; ".join((p.representatives or [])[:3])[:160]
            self.stdout.write(f"  {p.pk:>6}  {p.name[:40]:40}  {p.size:>6} questions  {p.status:10}  {examples}")

    def _rename(self, options: dict[str, Any]) -> None:
        proposal = self._proposal(options["run"], options["proposal"])
        review.rename_proposal(proposal, options["name"])
        self.stdout.write(f"proposal {proposal.pk} is now {options['name']!r}")

    def _merge(self, options: dict[str, Any]) -> None:
        run = self._run(options["run"])
        target, merged = review.merge_chosen(run, options["proposals"], target_id=options["proposals"][0])
        self.stdout.write(f"merged {merged} proposals into {target.pk} ({target.name!r})")

    def _discard(self, options: dict[str, Any]) -> None:
        proposal = self._proposal(options["run"], options["proposal"])
        review.discard_proposal(proposal)
        self.stdout.write(f"discarded proposal {proposal.pk} ({proposal.name!r})")

    def _promote(self, options: dict[str, Any]) -> None:
        experts = review.promote_run(self._run(options["run"]))
        self.stdout.write(f"{len(experts)} experts: " + ", ".join(f"{e.slug} ({e.name})" for e in experts))

    # -- the router ----------------------------------------------------------------------------

    def _train(self, options: dict[str, Any]) -> None:
        initial = {key: field.initial for key, field in TrainRouterForm.base_fields.items()}
        form = TrainRouterForm({**initial, **({"activation": options["activation"]} if options["activation"] else {})})
        if not form.is_valid():
            raise CommandError(f"bad training parameters: {form.errors.as_text()}")
        job = self._wait(training.enqueue_training(form.params(), None), options["here"], "routing.tasks.train_router")
        version = RouterVersion.objects.filter(version=(job.result or {}).get("router_version")).first()
        if version is None:
            raise CommandError("the training job finished without a router version")
        self._say_version(version)

    def _activate(self, options: dict[str, Any]) -> None:
        version = RouterVersion.objects.filter(version=options["version"]).first()
        if version is None:
            raise CommandError(f"no router version {options['version']}")
        self._say_version(training.activate_version(version))

    def _say_version(self, version: RouterVersion) -> None:
        accuracy = (version.metrics or {}).get("val", {}).get("accuracy")
        state = "serving" if version.is_active else "not serving"
        self.stdout.write(f"router v{version.version} ({state}): validation accuracy {accuracy}, experts {', '.join(version.experts)}")
        activation = (version.metrics or {}).get("activation")
        if activation:
            self.stdout.write(f"  {activation_verdict(activation)}")

    # -- helpers -------------------------------------------------------------------------------

    def _run(self, pk: int) -> ClusteringRun:
        run = ClusteringRun.objects.filter(pk=pk).first()
        if run is None:
            raise CommandError(f"no discovery run {pk}")
        return run

    def _proposal(self, run: int, pk: int) -> Proposal:
        proposal = Proposal.objects.filter(run_id=run, pk=pk).first()
        if proposal is None:
            raise CommandError(f"run {run} has no proposal {pk}")
        return proposal

    def _wait(self, job: Job, here: bool, task_name: str) -> Job:
        """``job`` once finished: run in this process (``here``) or by the worker, its log lines echoed; a failure is an error."""
        if here:
            from celery import current_app

            current_app.tasks[task_name].apply(args=(job.pk,))
        self.stdout.write(f"job {job.pk}: {job.title}" + ("" if here else " (waiting for the worker; --here runs it in this process)"))
        deadline, shown = time.monotonic() + WAIT_S, 0
        while True:
            job.refresh_from_db()
            lines = (job.log or "").splitlines()
            for line in lines[shown:]:
                self.stdout.write(f"  {line}")
            shown = len(lines)
            if job.status in FINISHED:
                break
            if time.monotonic() > deadline:
                raise CommandError(f"job {job.pk} is still {job.status} after {WAIT_S} s; follow it in the console or GET /api/v1/jobs/{job.pk}")
            time.sleep(POLL_S)
        if job.status != "succeeded":
            raise CommandError(f"job {job.pk} {job.status}: {job.error or 'no error recorded'}")
        return job
