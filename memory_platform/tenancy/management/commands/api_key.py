"""Keys of an existing tenant, outside the admin: create, list, rotate, revoke.

``create`` and ``rotate`` print the new secret alone on standard output (so a script can take it:
``KEY=$(manage.py api_key create demo)``) and say what they did on standard error. The secret
exists only in that output; the database keeps its hash. Each change is audited with actor "cli".
"""

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from memory_platform.tenancy.audit import key_uses
from memory_platform.tenancy.models import SCOPES, ApiKey, Tenant
from memory_platform.tenancy.services import api_key_create, api_key_revoke, api_key_rotate

#: Who the audit records a change made here as.
ACTOR = "cli"


class Command(BaseCommand):
    help = "Create, list, rotate or revoke a tenant's API keys (a new secret is printed once)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new key for TENANT; prints its secret")
        create.add_argument("tenant", help="the tenant's name")
        create.add_argument("--scopes", nargs="+", default=["read", "write"], choices=SCOPES)
        create.add_argument("--name", default="", help="what the key is for (default: '<tenant> key')")
        listing = actions.add_parser("list", help="TENANT's keys (prefixes, never secrets)")
        listing.add_argument("tenant")
        rotate = actions.add_parser(
            "rotate",
            help="print a new key like the one with PREFIX; the old one is revoked, or expires after a grace",
        )
        rotate.add_argument("prefix")
        rotate.add_argument(
            "--grace-minutes",
            type=int,
            default=0,
            help="how long the old key keeps working (default: revoked now)",
        )
        revoke = actions.add_parser("revoke", help="revoke the key with PREFIX")
        revoke.add_argument("prefix")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        getattr(self, f"_{opts['action']}")(opts)

    def _tenant(self, name: str) -> Tenant:
        tenant = Tenant.objects.filter(name=name).first()
        if tenant is None:
            raise CommandError(f"no tenant named {name!r}")
        return tenant

    def _key(self, prefix: str) -> ApiKey:
        by_prefix = ApiKey.objects.across_tenants("operator command: a key's prefix names it")
        key = by_prefix.filter(prefix=prefix).select_related("tenant").first()
        if key is None:
            raise CommandError(f"no API key with prefix {prefix!r}")
        return key

    def _create(self, opts) -> None:  # type: ignore[no-untyped-def]
        tenant = self._tenant(opts["tenant"])
        try:
            key, secret = api_key_create(
                tenant=tenant,
                name=opts["name"] or f"{tenant.name} key",
                scopes=opts["scopes"],
                actor=ACTOR,
                now=timezone.now(),
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stderr.write(
            f"created key {key.prefix} for {tenant.name} ({', '.join(key.scopes)}); shown once:"
        )
        self.stdout.write(secret)

    def _list(self, opts) -> None:  # type: ignore[no-untyped-def]
        tenant = self._tenant(opts["tenant"])
        uses = key_uses(tenant)
        for key in ApiKey.objects.filter(tenant=tenant).order_by("created"):
            state = "revoked" if key.revoked else "expired" if key.has_expired else "active"
            used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
            self.stdout.write(
                f"{key.prefix}  {state:7}  {','.join(key.scopes):16}  {used:26}  "
                f"{uses.get(key.prefix, 0):>8} uses  {key.name}"
            )

    def _rotate(self, opts) -> None:  # type: ignore[no-untyped-def]
        old = self._key(opts["prefix"])
        grace = opts["grace_minutes"]
        if grace < 0:
            raise CommandError("--grace-minutes must not be negative")
        try:
            key, secret = api_key_rotate(
                key=old, actor=ACTOR, now=timezone.now(), grace=timedelta(minutes=grace)
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        ending = f"{old.prefix} works for {grace} more minute(s)" if grace else f"revoked {old.prefix}"
        self.stderr.write(f"{ending}; new key {key.prefix} for {old.tenant.name}; shown once:")
        self.stdout.write(secret)

    def _revoke(self, opts) -> None:  # type: ignore[no-untyped-def]
        key = self._key(opts["prefix"])
        if api_key_revoke(key=key, actor=ACTOR, now=timezone.now()):
            self.stdout.write(f"revoked {key.prefix} ({key.tenant.name})")
        else:
            self.stdout.write(f"{key.prefix} ({key.tenant.name}) was revoked already")
