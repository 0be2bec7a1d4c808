"""Make sure an operator account and a demo tenant with a key exist; print how to use them.

The demo credentials are written to ``<var>/demo_credentials.json`` (mode 600, git-ignored) so
that every ``make run`` can print them again; the database itself keeps only the key's hash.
"""

import json
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from memory_platform.embeddings import get_embedder
from memory_platform.embeddings.local import LocalEmbedder
from memory_platform.tenancy.models import ApiKey, Tenant
from memory_platform.tenancy.services import api_key_create, tenant_create

DEMO_TENANT = "demo"


class Command(BaseCommand):
    help = "Create the admin user and the demo tenant (with an API key) when missing, and print them."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        path = settings.VAR_DIR / "demo_credentials.json"
        saved = json.loads(path.read_text()) if path.exists() else {}

        user_model = get_user_model()
        if not user_model.objects.filter(username="admin").exists():
            saved["admin_password"] = secrets.token_urlsafe(12)
            user_model.objects.create_superuser("admin", "admin@example.com", saved["admin_password"])

        tenant = Tenant.objects.filter(name=DEMO_TENANT).first() or tenant_create(name=DEMO_TENANT)
        key_ok = False
        if saved.get("api_key"):
            try:
                key_ok = ApiKey.objects.get_from_key(saved["api_key"]).tenant_id == tenant.id  # type: ignore[attr-defined]
            except ApiKey.DoesNotExist:
                key_ok = False
        if not key_ok:
            _, saved["api_key"] = api_key_create(
                tenant=tenant, name="demo key", scopes=["read", "write", "admin"]
            )

        # The first run exports the local model for queries (a few seconds); later runs find it.
        local = get_embedder("local")
        ready = isinstance(local, LocalEmbedder) and local.prepare()
        encoder = "ONNX Runtime" if ready else "torch (ONNX Runtime unavailable)"
        self.stdout.write(f"query embedding: {encoder}")

        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved))
        path.chmod(0o600)
        url = opts["url"].rstrip("/")
        self.stdout.write("")
        self.stdout.write(
            f"  admin      {url}/admin/   user admin / {saved.get('admin_password', '(set earlier)')}"
        )
        self.stdout.write(f"  API docs   {url}/api/docs/")
        self.stdout.write(f"  tenant     {tenant.name} ({tenant.id})")
        self.stdout.write(f"  API key    {saved['api_key']}")
        self.stdout.write(
            f"  try        curl -H 'Authorization: Bearer {saved['api_key']}' {url}/api/v1/whoami"
        )
        self.stdout.write("")
