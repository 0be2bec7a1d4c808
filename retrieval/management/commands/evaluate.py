import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from memory_platform.conf import memory_settings
from memory_platform.embeddings import Embedder, EmbeddingError, get_embedder


@contextlib.contextmanager
def embedder_of_new_tenants(name: str | None) -> Iterator[Embedder]:
    """The evaluation's tenants are new ones, made with the platform's embedder
    (``MEMORY["EMBEDDER"]``), or with ``name``'s within this block."""
    chosen = name or str(memory_settings.EMBEDDER)
    try:
        embedder = get_embedder(chosen)
    except EmbeddingError as exc:
        raise CommandError(str(exc)) from exc
    with override_settings(MEMORY={**settings.MEMORY, "EMBEDDER": chosen}):
        yield embedder


class Command(BaseCommand):
    help = (
        "Evaluate retrieval on LoCoMo: `evaluate locomo PATH`. Each conversation goes into its own tenant "
        "(real session dates as occurred_at, dia_id in turn metadata, image captions appended as "
        "'[shares ...]'); every question of categories 1-4 runs through the search service the API uses. "
        "Turns: the ranked list counts one item per matched turn of a hot hit (ordered by that turn's own "
        "score) and one item per warm or cold hit (which covers every turn of its episode); Recall(any)@k: "
        "an evidence turn among the first k items; ES@k: share of the evidence turns covered; MRR; nDCG@10 "
        "with binary gains. Episodes: one item per returned hit, any layer; Recall@3/5/10 and MRR. Tokens: "
        "the results' JSON at limit 10 (compact hits, as search returns them by default), WordPiece tokens of the "
        "local embedding model; and how often an evidence turn's text is among those results. Generated "
        "observation/summary fields are never indexed. `evaluate multilingual [PATH]`: the project's own Chinese "
        "and Russian set (retrieval/evaluation/data/multilingual.json by default), every question on the "
        "full-text lists alone and on the fused ranking, Recall@5/@10 and MRR per language and per match kind. "
        "`evaluate updates [PATH]`: the project's set of facts that change between sessions "
        "(retrieval/evaluation/data/updates.json by default): how often the newer memory ranks above the ones "
        "it replaces, with the supersedes links ingest made and without them. "
        "`--embedder` gives the evaluation's tenants another embedder than MEMORY_EMBEDDER's."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("dataset", choices=["locomo", "multilingual", "updates"])
        parser.add_argument("path", type=Path, nargs="?", default=None)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--keep", action="store_true", help="keep the evaluation tenants")
        parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
        parser.add_argument(
            "--weights",
            default=None,
            metavar="V,T,K",
            help="override the tenant policy's RRF vector weight, text weight and k",
        )
        parser.add_argument(
            "--embedder",
            default=None,
            metavar="NAME",
            help="the evaluation tenants' embedder: local, e5 or a dotted path (default: MEMORY_EMBEDDER)",
        )
        parser.add_argument(
            "--age",
            action="store_true",
            help="run lifecycle ticks so older sessions sit in warm and cold, and compare",
        )

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        from memory_platform.management.ready import interruptible, require_migrated
        from retrieval.evaluation import multilingual, updates

        require_migrated()
        if opts["path"] is None:
            if opts["dataset"] == "locomo":
                raise CommandError("evaluate locomo takes the dataset's path")
            opts["path"] = {"multilingual": multilingual, "updates": updates}[opts["dataset"]].DATA
        if not opts["path"].exists():
            raise CommandError(f"no such file: {opts['path']}")
        done = "the evaluation's tenants were dropped" if not opts["keep"] else "tenants made so far are kept"
        with interruptible(self.stderr.write, done), embedder_of_new_tenants(opts["embedder"]) as embedder:
            (self.stderr if opts["json"] else self.stdout).write(f"embedder: {embedder.model_id}")
            self._evaluate(opts)

    def _evaluate(self, opts):  # type: ignore[no-untyped-def]
        from retrieval.evaluation import locomo, multilingual, updates

        log = (lambda m: self.stderr.write(m)) if opts["json"] else (lambda m: self.stdout.write(m))
        own_sets = {"multilingual": multilingual, "updates": updates}
        if opts["dataset"] in own_sets:
            own = own_sets[opts["dataset"]]
            if opts["age"] or opts["weights"]:
                raise CommandError(f"evaluate {opts['dataset']} takes neither --age nor --weights")
            found = own.run(
                opts["path"], log=log, keep=opts["keep"], limit_conversations=opts["conversations"]
            )
            self.stdout.write(json.dumps(found) if opts["json"] else own.format_report(found))
            return
        weights = None
        if opts["weights"]:
            import dataclasses

            from retrieval.weights import platform_weights

            try:
                v, t, k = opts["weights"].split(",")
                weights = dataclasses.replace(platform_weights(), vector=float(v), text=float(t), k=int(k))
            except ValueError:
                raise CommandError("--weights takes V,T,K, e.g. 0.7,0.3,60") from None
        results = {
            "all_hot": locomo.run(
                opts["path"],
                log=log,
                keep=opts["keep"],
                limit_conversations=opts["conversations"],
                weights=weights,
            )
        }
        if opts["age"]:
            from retrieval.evaluation.aging import age_conversation, compression_report

            stats: list = []
            results["aged"] = locomo.run(
                opts["path"],
                log=log,
                keep=opts["keep"],
                limit_conversations=opts["conversations"],
                age=lambda tenant, conv, now: stats.append(age_conversation(tenant, conv, now)),
                weights=weights,
            )
            results["compression"] = compression_report(stats)
        if opts["json"]:
            self.stdout.write(json.dumps(results))
            return
        from retrieval.evaluation.metrics import format_drop, format_report

        self.stdout.write(format_report(results["all_hot"], "All hot"))
        if "aged" in results:
            from retrieval.evaluation.aging import format_compression

            self.stdout.write("")
            self.stdout.write(
                format_report(results["aged"], "Aged (ticks at the day after the last session)")
            )
            self.stdout.write("")
            self.stdout.write(format_drop(results["all_hot"], results["aged"]))
            self.stdout.write(format_compression(results["compression"]))
