import json

from django.core.management.base import BaseCommand, CommandError

from episodes.footprint import footprint
from memory_platform.tenancy.models import Tenant


class Command(BaseCommand):
    help = (
        "What tenants' memories weigh as stored: Postgres bytes per episode by layer (its row, its "
        "turns, a share of the indexes) and Redis bytes per hot episode (documents and index), "
        "beside what the hot quota counts for them. The README's sizing table comes from it."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("tenants", nargs="+", help="tenant names")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        tenants = []
        for name in opts["tenants"]:
            tenant = Tenant.objects.filter(name=name).first()
            if tenant is None:
                raise CommandError(f"no tenant named {name!r}")
            tenants.append(tenant)
        measured = [footprint(tenant) for tenant in tenants]
        if opts["json"]:
            self.stdout.write(json.dumps([m.as_dict() for m in measured], indent=2))
            return
        for m in measured:
            self.stdout.write(f"{m.tenant}")
            self.stdout.write(f"  {'layer':<6}{'episodes':>10}{'turns':>10}{'Postgres B/episode':>20}")
            for layer, part in m.layers.items():
                self.stdout.write(
                    f"  {layer:<6}{part.episodes:>10}{part.turns:>10}{part.postgres_bytes_per_episode:>20,}"
                )
            over = f"{m.redis_over_quota}x" if m.redis_over_quota is not None else "nothing hot for"
            self.stdout.write(
                f"  Redis: {m.redis_bytes:,} bytes ({m.redis_documents_bytes:,} in {m.redis_keys} documents, "
                f"{m.redis_index_bytes:,} index): {m.redis_bytes_per_hot_episode:,} a hot episode; "
                f"{over} what the hot quota counts ({m.quota_bytes:,} bytes)"
            )
