from django.apps import AppConfig


class MemoryPlatformConfig(AppConfig):
    name = "memory_platform"
    verbose_name = "Memory platform"
