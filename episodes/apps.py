from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from memory_platform.tenancy.models import Tenant

        from .indexing import drop_hot_on_tenant_delete

        post_delete.connect(drop_hot_on_tenant_delete, sender=Tenant, dispatch_uid="episodes.drop_hot")
