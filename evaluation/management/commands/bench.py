"""``manage.py bench {clustering,...}``: performance benchmarks that print figures (never timed tests)."""

from __future__ import annotations

from pathlib import Path

from evaluation import soak_restarts
from evaluation.management.commands import ReportCommand, names

VAR_DIR_HELP = "data folder to reuse (the demo is loaded once; default: a new temporary folder)"


class Command(ReportCommand):
    help = ("Benchmarks: `bench clustering --n 100000 --json FILE`, `bench retrieval --chunks 10000 --json FILE`, "
            "`bench serving --concurrency 16 --duration 30 --json FILE`, `bench generation --requests 10 --concurrency 8 --json FILE`, `bench handler --requests 1000 --json FILE`, "
            "`bench ingest [--folder DIR] --json FILE`.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="target", required=True)
        clustering = sub.add_parser("clustering", help="our sparse DBSCAN against sklearn's DBSCAN on 100k embeddings")
        clustering.add_argument("--n", type=int, default=100_000)
        clustering.add_argument("--datasets", default=None, help="folder holding dataset folders for the 'real' variant (default: ../shared/datasets)")
        clustering.add_argument("--skip-baseline", action="store_true", help="do not run sklearn's DBSCAN (it takes minutes at 100k)")
        retrieval = sub.add_parser("retrieval", help="search latency of one expert collection in the embedded store, against qdrant-client local mode")
        retrieval.add_argument("--chunks", type=int, default=10_000)
        retrieval.add_argument("--queries", type=int, default=200)
        retrieval.add_argument("--skip-baseline", action="store_true", help="do not time qdrant-client local mode")
        serving = sub.add_parser("serving", help="the chat API over HTTP under concurrent clients, against the encoder alone")
        serving.add_argument("--concurrency", type=int, default=16, help="concurrent clients (default 16)")
        serving.add_argument("--duration", type=float, default=30.0, help="seconds of measured load (default 30)")
        serving.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured load first (default 5)")
        serving.add_argument("--model", default="auto", help="model sent by the clients (auto, auto:fast or an expert's slug)")
        serving.add_argument("--models", default="", help="comma-separated models to measure in turn, e.g. auto,auto:fast (by_model in the JSON; "
                                                          "overrides --model)")
        serving.add_argument("--backends", default="", help="comma-separated EMBEDDING_BACKEND values to measure in turn, e.g. onnx-int8,onnx,torch "
                             "(default: the configured one, then torch); by_backend holds each one's figures. A backend of "
                             "another embedding space (onnx-int8) serves a demo loaded in its own folder under --var-dir")
        serving.add_argument("--encoder-seconds", type=float, default=8.0, help="seconds for each encoder-alone measurement")
        serving.add_argument("--max-warmup", type=float, default=180.0,
                             help="seconds of warm-up at most: it goes on in 5 s windows until the chunk sentence cache is warm (default 180)")
        serving.add_argument("--max-chunk-miss-rate", type=float, default=0.01,
                             help="warm when at most this share of a window's chunk lookups missed the cache (default 0.01)")
        soak = sub.add_parser("soak", help="bounded load on loopback with generator and vector-store faults injected on a schedule")
        soak.add_argument("--duration", type=float, default=300.0, help="seconds of load after the warm-up (default 300)")
        soak.add_argument("--rps", type=float, default=5.0, help="requests a second, sent open-loop (default 5)")
        soak.add_argument("--warmup", type=float, default=20.0, help="seconds of load before the first memory reading (default 20)")
        soak.add_argument("--restart", action="append", choices=["database", "cache"], default=None,
                          help="stop this server mid-run and start it again (repeatable): database (needs --database-url postgresql://..., "
                               "at 25%% of the run) or cache (needs --redis-url, at 65%%); it is started again whatever happens")
        soak.add_argument("--down-seconds", type=float, default=10.0, help="seconds each restarted server stays down (default 10)")
        soak.add_argument("--db-stop", default=soak_restarts.DB_STOP, help=f"command that stops PostgreSQL (default: {soak_restarts.DB_STOP!r})")
        soak.add_argument("--db-start", default=soak_restarts.DB_START, help=f"command that starts it (default: {soak_restarts.DB_START!r})")
        soak.add_argument("--redis-stop", default=soak_restarts.REDIS_STOP, help=f"command that stops Redis (default: {soak_restarts.REDIS_STOP!r})")
        soak.add_argument("--redis-start", default=soak_restarts.REDIS_START,
                          help="command that starts Redis as it ran before (default: as .ci/run starts it, "
                               f"{soak_restarts.REDIS_START.replace('%', '%%')!r})")
        generation = sub.add_parser("generation", help="the in-process model (BASE_MODEL): first streamed token, tokens/s, adapter switches")
        generation.add_argument("--requests", type=int, default=10, help="demo questions per concurrency level (default 10)")
        generation.add_argument("--concurrency", type=int, default=8, help="concurrent requests of the second level (default 8)")
        generation.add_argument("--adapter-rounds", type=int, default=10, help="forward passes per adapter-switch measurement (default 10)")
        generation.add_argument("--skip-adapters", action="store_true", help="do not measure adapter switching")
        handler = sub.add_parser("handler", help="the web process's own cost of a request through the ASGI handler, in process, against Django's stock handler")
        handler.add_argument("--requests", type=int, default=1000, help="requests per round (default 1000)")
        handler.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported (default 5)")
        handler.add_argument("--chat", action="store_true", help="measure chat requests on the demo's data instead (the chat view's own CPU, encoder excluded)")
        handler.add_argument("--concurrency", type=int, default=8, help="with --chat: requests in flight at once (default 8)")
        handler.add_argument("--var-dir", default=None, help="with --chat: the demo's data folder (loaded first if empty; default: a new one)")
        ingest = sub.add_parser("ingest", help="documents and passages indexed per second through the upload path, in a throw-away workspace")
        ingest.add_argument("--folder", action="append", default=None, help="files or folders to ingest (repeatable; default: doc2dial's docs.jsonl)")
        ingest.add_argument("--in-place", action="store_true", help="ingest into the current database instead of a throw-away workspace")
        reader = sub.add_parser("reader", help="the milliseconds the extractive answer's reader adds per answer, on doc2dial's validation questions")
        reader.add_argument("--dataset", default="../shared/datasets/doc2dial", help="folder with docs.jsonl, qrels.jsonl and queries.jsonl")
        reader.add_argument("--questions", type=int, default=100)
        for p in (serving, soak):
            p.add_argument("--var-dir", default=None, help=VAR_DIR_HELP)
            p.add_argument("--workers", "--web-workers", dest="workers", type=int, default=1, help="uvicorn worker processes (default 1)")
            p.add_argument("--database-url", default=None, help="run the servers on this PostgreSQL database (scale-out; default: the bench's SQLite)")
            p.add_argument("--redis-url", default=None, help="share rate limits, breakers and caches through this Redis (default: per process)")
        self.common_options(clustering, retrieval, serving, soak, generation, handler, ingest, reader)

    def handle(self, *args, **options):
        if options["target"] == "clustering":
            from evaluation.clustering import bench_clustering

            report = bench_clustering(n=options["n"], datasets=options["datasets"], skip_baseline=options["skip_baseline"], say=self.stdout.write)
        elif options["target"] == "handler":
            from evaluation.bench_handler import bench_chat, bench_handler

            if options["chat"]:
                report = bench_chat(requests=options["requests"], rounds=options["rounds"], concurrency=options["concurrency"],
                                    var_dir=options["var_dir"], say=self.stdout.write)
            else:
                report = bench_handler(requests=options["requests"], rounds=options["rounds"], say=self.stdout.write)
        elif options["target"] == "retrieval":
            from evaluation.bench_retrieval import bench_retrieval

            report = bench_retrieval(chunks=options["chunks"], queries=options["queries"], baseline=not options["skip_baseline"], say=self.stdout.write)
        elif options["target"] == "serving":
            from evaluation.bench_serving import bench_serving

            report = bench_serving(concurrency=options["concurrency"], duration=options["duration"], var_dir=options["var_dir"],
                                   warmup=options["warmup"], workers=options["workers"], model=options["model"],
                                   encoder_seconds=options["encoder_seconds"], max_warmup=options["max_warmup"],
                                   max_chunk_miss_rate=options["max_chunk_miss_rate"],
                                   backends=names(options["backends"]) or None,
                                   database_url=options["database_url"], redis_url=options["redis_url"],
                                   models=names(options["models"]) or None, say=self.stdout.write)
        elif options["target"] == "soak":
            from evaluation.bench_soak import bench_soak

            report = bench_soak(duration=options["duration"], rps=options["rps"], var_dir=options["var_dir"], warmup=options["warmup"],
                                workers=options["workers"], database_url=options["database_url"], redis_url=options["redis_url"],
                                restart=options["restart"], down_s=options["down_seconds"],
                                commands={k: options[k] for k in ("db_stop", "db_start", "redis_stop", "redis_start")}, say=self.stdout.write)
        elif options["target"] == "ingest":
            if not options["in_place"]:
                return self.rerun_isolated("ingest", disk_cache=False)
            from evaluation.bench_ingest import bench_ingest

            report = bench_ingest([Path(p) for p in options["folder"] or []], say=self.stdout.write)
        elif options["target"] == "reader":
            from evaluation.bench_reader import bench_reader

            report = bench_reader(Path(options["dataset"]), questions=options["questions"], say=self.stdout.write)
        elif options["target"] == "generation":
            from evaluation.bench_generation import bench_generation

            report = bench_generation(requests=options["requests"], concurrency=options["concurrency"], adapter_rounds=options["adapter_rounds"],
                                      skip_adapters=options["skip_adapters"], say=self.stdout.write)
        self.emit(report, options["json_path"])
