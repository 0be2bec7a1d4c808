"""Make sure an operator account and a demo tenant exist; print their credentials once.

The admin password and the demo key are printed when they are created and never again: the
database keeps only their hashes, and nothing is written in clear. ``manage.py changepassword
admin`` sets a new password; ``manage.py api_key create demo`` makes a new key.
"""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from memory_platform.embeddings import get_embedder
from memory_platform.embeddings.local import LocalEmbedder
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import api_key_create, tenant_create

DEMO_TENANT = "demo"


class Command(BaseCommand):
    help = "Create the admin user and the demo tenant (with an API key) when missing; print them once."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        # Older versions kept the demo credentials here in clear; they are not needed any more.
        legacy = settings.VAR_DIR / "demo_credentials.json"
        if legacy.exists():
            legacy.unlink()
            self.stdout.write(f"removed {legacy} (credentials are no longer stored in clear)")

        user_model = get_user_model()
        password = None
        if not user_model.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser("admin", "admin@example.com", password)

        tenant = Tenant.objects.filter(name=DEMO_TENANT).first()
        secret = None
        if tenant is None:
            tenant = tenant_create(name=DEMO_TENANT)
            _, secret = api_key_create(
                tenant=tenant,
                name="demo key",
                scopes=["read", "write", "admin"],
                actor="cli",
                now=timezone.now(),
            )

        # The first run exports the local model for queries (a few seconds); later runs find it.
        local = get_embedder("local")
        ready = isinstance(local, LocalEmbedder) and local.prepare()
        encoder = "ONNX Runtime" if ready else "torch (ONNX Runtime unavailable)"
        self.stdout.write(f"query embedding: {encoder}")

        url = opts["url"].rstrip("/")
        once = "   (shown once; store it now)"
        self.stdout.write("")
        if password is not None:
            self.stdout.write(f"  admin      {url}/admin/   user admin / {password}{once}")
        else:
            self.stdout.write(
                f"  admin      {url}/admin/   user admin (new password: manage.py changepassword admin)"
            )
        self.stdout.write(f"  API docs   {url}/api/docs/")
        self.stdout.write(f"  tenant     {tenant.name} ({tenant.id})")
        if secret is not None:
            self.stdout.write(f"  API key    {secret}{once}")
        else:
            self.stdout.write("  API key    new one: .venv/bin/python manage.py api_key create demo")
        self.stdout.write("")
