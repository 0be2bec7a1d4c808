from django.apps import AppConfig


class MemoryPlatformConfig(AppConfig):
    name = "memory_platform"
    verbose_name = "Memory platform"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from . import db
        from .api import schema  # noqa: F401  (registers the auth scheme with drf-spectacular)

        connection_created.connect(db.register_adapters, dispatch_uid="memory_platform.db.adapters")
