from django.apps import AppConfig
from django.db.models.signals import post_save


class LifecycleConfig(AppConfig):
    name = "lifecycle"

    def ready(self) -> None:
        from memory_platform.tenancy.models import Tenant

        from .signals import create_policy

        post_save.connect(create_policy, sender=Tenant, dispatch_uid="lifecycle.create_policy")
