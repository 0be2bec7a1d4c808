from django.apps import AppConfig


class MemoryPlatformConfig(AppConfig):
    name = "memory_platform"
    verbose_name = "Memory platform"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from . import db

        connection_created.connect(db.register_adapters, dispatch_uid="memory_platform.db.adapters")
