import json
import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from memory_platform.tenancy.models import SCOPES
from memory_platform.tenancy.services import api_key_create, tenant_create


class Command(BaseCommand):
    help = "Create a tenant and one API key for it; the key is printed once and never stored."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("name")
        parser.add_argument("--scopes", nargs="+", default=["read", "write"], choices=SCOPES)
        parser.add_argument(
            "--embedder", default=None, help="local (default), openai, provided, or a dotted path"
        )
        openai = parser.add_argument_group("openai embedder (any OpenAI-compatible /embeddings server)")
        openai.add_argument("--embedder-url", help="base URL, e.g. http://tei:8080/v1")
        openai.add_argument("--embedder-model", help="model name the server knows")
        openai.add_argument("--embedder-key", help="API key (default: $MEMORY_EMBEDDER_KEY)")
        openai.add_argument("--embedding-dim", type=int, help="dimensions the model answers (default 384)")
        openai.add_argument(
            "--send-dimensions",
            action="store_true",
            help="ask the server for --embedding-dim dimensions (models that shorten their vectors)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON line")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        try:
            tenant = tenant_create(
                name=opts["name"],
                embedder=opts["embedder"],
                embedder_url=opts["embedder_url"],
                embedder_model=opts["embedder_model"],
                embedder_key=opts["embedder_key"] or os.environ.get("MEMORY_EMBEDDER_KEY"),
                embedding_dim=opts["embedding_dim"],
                embedder_send_dimensions=opts["send_dimensions"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        key, secret = api_key_create(
            tenant=tenant, name=f"{tenant.name} key", scopes=opts["scopes"], actor="cli", now=timezone.now()
        )
        if opts["json"]:
            self.stdout.write(
                json.dumps({"tenant": tenant.name, "tenant_id": str(tenant.id), "api_key": secret})
            )
        else:
            self.stdout.write(f"tenant  {tenant.name} ({tenant.id})")
            self.stdout.write(f"scopes  {', '.join(key.scopes)}")
            self.stdout.write(f"api key {secret}   (shown once; store it now)")
