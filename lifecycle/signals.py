from typing import Any

from memory_platform.tenancy.models import Tenant

from .models import MemoryPolicy


def create_policy(sender: type[Tenant], instance: Tenant, created: bool, **kwargs: Any) -> None:
    """Every tenant has a policy from its first moment (defaults: the `metabolism` preset)."""
    if created:
        MemoryPolicy.objects.get_or_create(tenant=instance)
