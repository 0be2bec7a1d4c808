from django.core.management.base import BaseCommand, CommandError

from episodes.indexing import rebuild_hot
from episodes.stores.hot import hot_store
from memory_platform.tenancy.models import Tenant


class Command(BaseCommand):
    help = "Rebuild the Redis hot index from Postgres (all tenants, or one)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", help="tenant name or id")
        parser.add_argument(
            "--if-outdated",
            action="store_true",
            help="only when Redis holds indexes of an earlier version (make run checks this on start)",
        )

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        if opts["if_outdated"]:
            outdated = hot_store().outdated_indexes()
            if not outdated:
                return
            self.stdout.write(
                f"the hot index changed format ({len(outdated)} outdated index(es)): rebuilding"
            )
            hot_store().drop_outdated()  # deleted tenants' too, which the rebuild below never visits
        tenant = None
        if opts["tenant"]:
            tenant = Tenant.objects.filter(name=opts["tenant"]).first()
            if tenant is None:
                try:
                    tenant = Tenant.objects.filter(pk=opts["tenant"]).first()
                except Exception:  # not a UUID
                    tenant = None
            if tenant is None:
                raise CommandError(f"no tenant named {opts['tenant']!r}")

        def progress(t, done, total):  # type: ignore[no-untyped-def]
            self.stdout.write(f"  {t.name}: {done}/{total} episodes")

        total = rebuild_hot(tenant=tenant, progress=progress)
        self.stdout.write(self.style.SUCCESS(f"indexed {total} hot episode(s)"))
