from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "memory_platform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"
