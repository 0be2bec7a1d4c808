import json
import logging

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Benchmarks. `bench ingest`: turns/s durable-only (Postgres write, async indexing), with caller "
        "vectors (`provided`: Postgres + Redis) and with the local MiniLM embedder, beside the embedder's "
        "own throughput on the same texts (texts/s, the mean of a run before and one after the platform's) "
        "and the platform's share of it. `bench search`: search latency at 10k/100k episodes through the "
        "service and over HTTP, beside the floor (the embedding, Redis and Postgres alone), and on the service "
        "paths and the floor's parts the processor time per search of this process and the embedded "
        "Postgres and Redis (docs/benchmarks.md#processor-time). `bench tick`: the "
        "lifecycle tick step by step over `--tenants` tenants of `--episodes` episodes, a first tick "
        "`--days` after the load and a second at the same time. `bench soak`: `--minutes` of ingest, "
        "searches, unpacks, forgetting and ticks on `--tenants` tenants with a simulated clock running "
        "`--days` days, the embedded Redis restarted once near the middle (not with `--no-restart`); every "
        "`--interval` minutes a row: operations and errors, search p95, memory of this process, Redis and "
        "Postgres, dead tuples, GIN indexes, the tenants' RediSearch bytes and entries per document. Then a "
        "verdict: over the samples of the last half a least-squares line per metric, which grows when it "
        "rises by more than 20% of its mean there and more than the metric's floor (docs/benchmarks.md)."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("what", choices=["ingest", "search", "tick", "soak"])
        parser.add_argument("--turns", type=int, default=2000, help="ingest: turns per mode")
        parser.add_argument("--batch", type=int, default=100, help="ingest: turns per call")
        parser.add_argument("--modes", default="durable,provided,local")
        parser.add_argument("--sizes", default="10000,100000", help="search: episode counts")
        parser.add_argument("--queries", type=int, default=200, help="search: queries per measurement")
        parser.add_argument("--episodes", type=int, default=10_000, help="tick: episodes per tenant")
        parser.add_argument("--tenants", type=int, default=None, help="tick: tenants (1); soak: tenants (3)")
        parser.add_argument(
            "--days",
            type=float,
            default=None,
            help="tick: days from the load to the ticks (1); soak: simulated days (300)",
        )
        parser.add_argument(
            "--vectors", type=float, default=1.0, help="tick: the share of packed episodes with a vector"
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="tick: processes sharing the tenants' ticks, as make run's worker processes (MEMORY_WORKERS) do",
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--keep", action="store_true", help="search, tick: keep the loaded tenants")
        parser.add_argument(
            "--compare-redis",
            metavar="URL",
            default=None,
            help=(
                "search: also time the service with its hot tier on this Redis (a redis+cluster:// URL, "
                "say), each query on both in turn, beside the default REDIS_URL"
            ),
        )
        parser.add_argument(
            "--against",
            metavar="REV",
            default=None,
            help=(
                "search: also time this tree's search and REV's (a git revision with the same migrations) "
                "over HTTP, each query asked of both in turn, with the paired median difference"
            ),
        )
        parser.add_argument(
            "--clients",
            default=None,
            help=(
                "search: also a load of this many concurrent clients over HTTP (a list: 1,4,16), each "
                "for --seconds, with the searches per second and the latency they saw"
            ),
        )
        parser.add_argument(
            "--seconds", type=float, default=15.0, help="search: how long each --clients load runs"
        )
        parser.add_argument(
            "--url",
            default=None,
            help="search: the --clients load against this running platform (make run's: http://127.0.0.1:8000) "
            "instead of the web server the run starts",
        )
        parser.add_argument(
            "--reuse",
            action="store_true",
            help=(
                "search: reuse a tenant kept by an earlier --keep run (and keep it); tick: tick the "
                "kept tenants (loading those missing) --days after now, and keep them"
            ),
        )
        soak = parser.add_argument_group("soak")
        soak.add_argument("--minutes", type=float, default=60.0, help="soak: how long (fractions allowed)")
        soak.add_argument("--interval", type=float, default=5.0, help="soak: minutes between two rows")
        soak.add_argument(
            "--embedder",
            choices=["provided", "local"],
            default="provided",
            help="soak: turns and queries with caller vectors, or embedded by the local model",
        )
        soak.add_argument("--turns-per-s", type=float, default=20.0, help="soak: turns ingested a second")
        soak.add_argument("--searches-per-s", type=float, default=10.0, help="soak: searches a second")
        soak.add_argument("--no-restart", action="store_true", help="soak: leave Redis running throughout")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        log = (lambda msg: self.stderr.write(msg)) if opts["json"] else (lambda msg: self.stdout.write(msg))
        from memory_platform.management.ready import interruptible, require_migrated

        require_migrated()
        with interruptible(self.stderr.write, "the tenants it loaded were dropped (kept ones stay)"):
            self._run(opts, log)

    def _run(self, opts, log):  # type: ignore[no-untyped-def]
        if opts["what"] == "ingest":
            from retrieval.bench.ingest import run_mode

            # The durable mode queues a task per batch: django-q's "Enqueued" lines are not results.
            logging.getLogger("django-q").setLevel(logging.WARNING)

            rows = [
                run_mode(mode.strip(), opts["turns"], opts["batch"], opts["seed"], log)
                for mode in opts["modes"].split(",")
            ]
            if opts["json"]:
                self.stdout.write(json.dumps({"bench": "ingest", "results": rows}))
                return
            self.stdout.write(
                f"{'mode':<10}{'turns':>8}{'batch':>7}{'seconds':>10}{'turns/s':>10}"
                f"{'embedder texts/s':>18}{'share':>8}"
            )
            for r in rows:
                alone = f"{r['embedder_texts_per_s']:.1f}" if "embedder_texts_per_s" in r else ""
                share = f"{r['embedder_share']:.0%}" if "embedder_share" in r else ""
                self.stdout.write(
                    f"{r['mode']:<10}{r['turns']:>8}{r['batch']:>7}{r['seconds']:>10.2f}{r['turns_per_s']:>10.1f}"
                    f"{alone:>18}{share:>8}"
                )
            return
        if opts["what"] == "tick":
            self._tick(opts, log)
            return
        if opts["what"] == "soak":
            self._soak(opts, log)
            return
        try:
            from retrieval.bench.search import run_search_bench
        except ImportError as exc:
            raise CommandError(f"search benchmark unavailable: {exc}") from exc
        from retrieval.bench.revisions import RevisionError

        try:
            result = run_search_bench(
                sizes=[int(s) for s in opts["sizes"].split(",")],
                queries=opts["queries"],
                seed=opts["seed"],
                keep=opts["keep"],
                reuse=opts["reuse"],
                log=log,
                compare_redis=opts["compare_redis"],
                against=opts["against"],
                clients=[int(n) for n in opts["clients"].split(",")] if opts["clients"] else [],
                seconds=opts["seconds"],
                url=opts["url"],
            )
        except RevisionError as exc:
            raise CommandError(f"--against: {exc}") from None
        if opts["json"]:
            self.stdout.write(json.dumps({"bench": "search", "results": result}))
        else:
            from retrieval.bench.search import format_table

            self.stdout.write(format_table(result))

    def _tick(self, opts, log):  # type: ignore[no-untyped-def]
        from retrieval.bench.tick import format_table, run_tick_bench

        result = run_tick_bench(
            episodes=opts["episodes"],
            tenants=1 if opts["tenants"] is None else opts["tenants"],
            days=1.0 if opts["days"] is None else opts["days"],
            seed=opts["seed"],
            log=log,
            vectors_share=opts["vectors"],
            workers=opts["workers"],
            keep=opts["keep"],
            reuse=opts["reuse"],
        )
        self.stdout.write(json.dumps({"bench": "tick", **result}) if opts["json"] else format_table(result))

    def _soak(self, opts, log):  # type: ignore[no-untyped-def]
        from retrieval.bench.soak import SoakSettings, run_soak
        from retrieval.bench.soak_report import format_verdict, header, row

        config = SoakSettings(
            minutes=opts["minutes"],
            interval=opts["interval"],
            tenants=3 if opts["tenants"] is None else opts["tenants"],
            seed=opts["seed"],
            embedder=opts["embedder"],
            restart=not opts["no_restart"],
            days=300.0 if opts["days"] is None else opts["days"],
            turns_per_s=opts["turns_per_s"],
            searches_per_s=opts["searches_per_s"],
        )
        try:
            config.check()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        # The tick purges every few seconds, each time with a line: the rows are what to read.
        logging.getLogger("lifecycle.forgetting").setLevel(logging.WARNING)

        def each(sample):  # type: ignore[no-untyped-def]
            # Each row as it is taken, on the log with --json (the document comes at the end).
            if not sample["minute"]:
                log(header())
            log(row(sample))

        result = run_soak(config, log, each)
        self.stdout.write(json.dumps({"bench": "soak", **result}) if opts["json"] else format_verdict(result))
