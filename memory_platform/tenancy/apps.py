from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "memory_platform.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from .login_throttle import record_failed_login

        user_login_failed.connect(record_failed_login, dispatch_uid="tenancy.record_failed_login")
