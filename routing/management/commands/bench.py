"""``manage.py bench {clustering,...}``: performance benchmarks that print figures (never timed tests)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Benchmarks: `bench clustering --n 100000 --json FILE`, `bench retrieval --chunks 10000 --json FILE`."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="target", required=True)
        clustering = sub.add_parser("clustering", help="our sparse DBSCAN against sklearn's DBSCAN on 100k embeddings")
        clustering.add_argument("--n", type=int, default=100_000)
        clustering.add_argument("--datasets", default=None, help="folder holding dataset folders for the 'real' variant (default: ../shared/datasets)")
        clustering.add_argument("--skip-baseline", action="store_true", help="do not run sklearn's DBSCAN (it takes minutes at 100k)")
        clustering.add_argument("--json", dest="json_path", default=None)
        clustering.add_argument("--skip-checks", action="store_true")
        retrieval = sub.add_parser("retrieval", help="search latency of one expert collection in the embedded store, against qdrant-client local mode")
        retrieval.add_argument("--chunks", type=int, default=10_000)
        retrieval.add_argument("--queries", type=int, default=200)
        retrieval.add_argument("--skip-baseline", action="store_true", help="do not time qdrant-client local mode")
        retrieval.add_argument("--json", dest="json_path", default=None)
        retrieval.add_argument("--skip-checks", action="store_true")

    def handle(self, *args, **options):
        if options["target"] == "clustering":
            from labeling.evaluation import bench_clustering

            report = bench_clustering(n=options["n"], datasets=options["datasets"], skip_baseline=options["skip_baseline"], say=self.stdout.write)
        elif options["target"] == "retrieval":
            from knowledge.bench import bench_retrieval

            report = bench_retrieval(chunks=options["chunks"], queries=options["queries"], baseline=not options["skip_baseline"], say=self.stdout.write)
        self.stdout.write(json.dumps(report, indent=2))
        if options["json_path"]:
            Path(options["json_path"]).write_text(json.dumps(report, indent=2))
            self.stdout.write(self.style.SUCCESS(f"wrote {options['json_path']}"))
