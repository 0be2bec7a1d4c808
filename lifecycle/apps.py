from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "lifecycle"
